import json

import pytest
import torch
from safetensors.torch import load_file

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.train.stages import stage_configs, train_recipe

RECIPE = """
description: two stages
model: {name: tiny}
env: {name: calculator, num_train_tasks: 8, num_eval_tasks: 2}
rollout: {group_size: 2, max_turns: 2, max_tokens_per_turn: 8, max_total_tokens: 256}
trainer: {steps: 3, progress: false, tensorboard: false, eval_before: false}
stages:
  - name: sft
    warm_start: {num_tasks: 4, lr: 1.0e-3}
    trainer: {steps: 0}
  - name: rl
    algo: {name: rloo}
"""


def write(tmp_path, text=RECIPE):
    path = tmp_path / "two.yaml"
    path.write_text(text)
    return path


def test_stages_merge_recipe_stage_then_overrides(tmp_path):
    cfg = load_config(write(tmp_path), [f"trainer.out_dir={tmp_path}", "optim.lr=0.01"])
    sft, rl = stage_configs(cfg)
    assert (sft.trainer.steps, rl.trainer.steps) == (0, 3)  # the stage's value wins
    assert (sft.algo.name, rl.algo.name) == ("grpo", "rloo")
    assert sft.optim.lr == rl.optim.lr == 0.01  # command-line overrides reach every stage
    assert (sft.trainer.run_name, rl.trainer.run_name) == ("two/sft", "two/rl")
    assert sft.trainer.export_model and not rl.trainer.export_model
    assert rl.model.name == str(tmp_path / "two" / "sft" / "model")  # chained


def test_smoke_applies_after_the_stage(tmp_path):
    cfg = load_config(write(tmp_path), smoke=True)
    assert [stage["trainer"]["steps"] for stage in cfg.stages] == [2, 2]


@pytest.mark.parametrize(
    "stages, match",
    [
        ("- {warm_start: {num_tasks: 1}}", "must be a mapping with a 'name'"),
        ("- {name: a}\n  - {name: a}", "distinct"),
        ("- {name: 'a/b'}", "letters, digits"),
        ("- {name: a, algo: {name: nope}}", "algo.name"),
        (  # a team is a model per role: the next stage loads one model
            "- {name: a, env: {name: solver_verifier}, rollout: {mode: memory}, "
            "model: {role_policies: models}}\n  - {name: b}",
            "stage 'a' has model.role_policies=models",
        ),
    ],
)
def test_bad_stages_fail_at_load(tmp_path, stages, match):
    text = RECIPE.split("stages:")[0] + "stages:\n  " + stages + "\n"
    with pytest.raises(ConfigError, match=match):
        load_config(write(tmp_path, text))


def test_pipeline_chains_weights_and_skips_finished_stages(tmp_path, capsys):
    cfg = load_config(write(tmp_path), [f"trainer.out_dir={tmp_path}"])
    summary = train_recipe(cfg)
    assert set(summary["stages"]) == {"sft", "rl"}
    assert json.loads((tmp_path / "two" / "summary.json").read_text())["recipe"] == "two"
    exported = load_file(tmp_path / "two" / "sft" / "model" / "model.safetensors")
    # stage 2's step-0 checkpoint holds the weights it started from: stage 1's export
    start = load_file(tmp_path / "two" / "rl" / "checkpoints" / "step_000000" / "model.safetensors")
    common = exported.keys() & start.keys()  # tied embeddings are stored under one name
    assert len(common) >= len(exported) - 1
    for name in common:
        assert torch.equal(exported[name], start[name]), name
    capsys.readouterr()
    train_recipe(cfg)  # a rerun finds both stages done
    out = capsys.readouterr().out
    assert out.count("already done, skipped") == 2
