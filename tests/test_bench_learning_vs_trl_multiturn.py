"""bench/learning_vs_trl_multiturn.py: TRL's tool-calling side is multi-turn and well-formed.

TRL is a bench-only extra: skipped where it is not installed (CI). No model is loaded.
"""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path

import pytest

pytest.importorskip("trl")

SPEC = importlib.util.spec_from_file_location(
    "learning_vs_trl_multiturn",
    Path(__file__).resolve().parent.parent / "bench" / "learning_vs_trl_multiturn.py",
)
assert SPEC is not None and SPEC.loader is not None
bench = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(bench)


def trl_tokenizer():
    from trl.chat_template_utils import qwen2_5_chat_template, supports_tool_calling

    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_tokenizer

    tokenizer = load_tokenizer(ModelConfig())  # a fresh copy: the template is replaced below
    assert not supports_tool_calling(tokenizer)  # why the bench installs another template
    tokenizer.chat_template = qwen2_5_chat_template
    assert supports_tool_calling(tokenizer)
    return tokenizer


def test_trl_warm_start_episodes_are_multi_turn_tool_calls_trl_parses_back() -> None:
    from trl.chat_template_utils import add_response_schema, qwen2_5_chat_template

    from agentic_rl.envs.from_config import make_tasks

    args = argparse.Namespace(lr=5e-6, precision="fp32", warm_start_tasks=3, eval_tasks=2)
    cfg = bench.recipe_config(args, 0)
    tokenizer = add_response_schema(trl_tokenizer())  # as GRPOTrainer(tools=...) does
    protocol = bench.TRLToolProtocol(
        tokenizer, bench.make_search_function(cfg.env.topk), qwen2_5_chat_template
    )
    demos, n = bench.trl_expert_demos(cfg, make_tasks(cfg, "train"), tokenizer, protocol)
    assert n == len(demos) == 3
    eos = tokenizer.eos_token_id
    for demo in demos:
        assert len(demo.turn_spans) >= 2  # at least one search, then the answer
        trained = [i for i, m in enumerate(demo.loss_mask) if m]
        assert trained == [i for s, e in demo.turn_spans for i in range(s, e)]
        actions = []
        for start, end in demo.turn_spans:
            turn = demo.token_ids[start:end]
            assert turn[-1] == eos and eos not in turn[:-1]  # a turn ends where TRL stops
            actions.append(protocol.parse(turn, demo.token_ids[:start], "eos"))
        assert [a.kind for a in actions[:-1]] == ["tool"] * (len(actions) - 1)
        assert actions[-1].kind == "answer"
        # Between turns: exactly the tool turn TRL appends for the search result.
        (_, end), (next_start, _) = demo.turn_spans[0], demo.turn_spans[1]
        query = actions[0].arguments["query"]
        from agentic_rl.types import Observation

        observation = Observation(content=bench.search_text(cfg.env.topk, query), name="search")
        assert demo.token_ids[end:next_start] == protocol.observation_ids(observation)


def test_level_and_minutes_to_reach_are_hand_computed() -> None:
    curve = [
        {"minutes": 1.0, "success": 0.0},
        {"minutes": 2.0, "success": 0.5},
        {"minutes": 3.0, "success": 1.0},
        {"minutes": 4.0, "success": 0.5},
    ]
    assert bench.level(curve, 2) == pytest.approx(0.75)
    # 2-step means: 0.25 (min 2), 0.75 (min 3), 0.75 (min 4)
    assert bench.minutes_to_reach(curve, 0.75, 2) == 3.0
    assert bench.minutes_to_reach(curve, 0.8, 2) is None


def test_parallel_children_are_waited_for_together(tmp_path: Path) -> None:
    import subprocess
    import sys

    kids = []
    for name, delay in (("ours-0", 0.5), ("trl-0", 0.0)):
        result = tmp_path / f"{name}.json"
        code = (
            f"import json, time; time.sleep({delay}); print('[{name[:-2]} 0] step 0');"
            f"open({str(result)!r}, 'w').write(json.dumps({{'name': {name!r}}}))"
        )
        log = open(tmp_path / f"{name}.log", "w")  # noqa: SIM115
        kids.append((name, subprocess.Popen([sys.executable, "-c", code], stdout=log), result))
    out = bench.wait_children(kids, tmp_path)
    assert {k: v["name"] for k, v in out.items()} == {"ours-0": "ours-0", "trl-0": "trl-0"}
    assert all(v["child_wall_s"] >= 0 for v in out.values())
