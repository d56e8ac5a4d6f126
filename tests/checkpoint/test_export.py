"""`agentic-rl export` and the end-of-run model: a plain transformers directory plus how to
prompt it (generation config with the action tags as stop strings, a model card)."""

from __future__ import annotations

import json

import torch

from agentic_rl.checkpoint.export import export_checkpoint
from agentic_rl.checkpoint.io import save_checkpoint
from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.model.load import load_policy


def _run_with_checkpoint(tmp_path):
    cfg = load_config(None, ["model.name=tiny", "env.num_eval_tasks=2"])
    policy, _ = load_policy(cfg.model)
    run = tmp_path / "run"
    save_checkpoint(run, 3, policy, None)
    (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    return cfg, run


def test_export_writes_a_model_card_and_generation_config(tmp_path):
    cfg, run = _run_with_checkpoint(tmp_path)
    out = export_checkpoint(run, tmp_path / "model")
    card = (out / "README.md").read_text()
    messages = json.loads((out / "chat_example.json").read_text())
    system = messages[0]["content"]
    assert messages[0]["role"] == "system" and system in card
    assert "search_qa_grpo" in card and "`</search>`" in card and "`</answer>`" in card
    assert "<information>RESULT</information>" in card  # how tool results are appended
    assert "apply_chat_template" in card and "AutoModelForCausalLM" in card
    gen = json.loads((out / "generation_config.json").read_text())
    assert gen["stop_strings"] == ["</search>", "</answer>"]
    assert gen["max_new_tokens"] == cfg.rollout.max_tokens_per_turn
    assert gen["do_sample"] is True and gen["temperature"] == cfg.rollout.temperature


def test_the_model_card_snippet_runs_with_plain_transformers(tmp_path):
    _, run = _run_with_checkpoint(tmp_path)
    out = export_checkpoint(run, tmp_path / "model")
    card = (out / "README.md").read_text()
    snippet = card.split("```python\n")[1].split("```")[0]
    snippet = snippet.replace("PATH/TO/THIS/DIR", str(out))
    snippet = snippet.replace("tokenizer=tokenizer)", "tokenizer=tokenizer, max_new_tokens=3)")
    torch.manual_seed(0)
    exec(compile(snippet, "model_card_snippet", "exec"), {})  # noqa: S102 (our own card)


def test_cli_export(tmp_path, capsys):
    _, run = _run_with_checkpoint(tmp_path)
    assert main(["export", str(run), "--out", str(tmp_path / "m")]) == 0
    assert (tmp_path / "m" / "README.md").is_file()
    assert "model.name=" in capsys.readouterr().out
