"""The newcomer path: smoke runs in their own directory, refused resumes of another
experiment, eval progress and Ctrl-C, a bad out_dir or a hub model name caught before anything
is built, help texts and recipe-name suggestions."""

from __future__ import annotations

import json
import os

from agentic_rl.cli import build_parser, main
from agentic_rl.config.load import load_config

TINY = ["model.name=tiny", "trainer.progress=false", "trainer.eval_before=false"]


def _no_build(monkeypatch):
    """Fail the test if the trainer gets as far as building the model."""
    from agentic_rl.train import loop

    def boom(cfg):
        raise AssertionError("the model was built")

    monkeypatch.setattr(loop, "build", boom)


def test_smoke_runs_get_their_own_run_directory():
    assert load_config("search_qa_grpo", smoke=True).trainer.run_name == "search_qa_grpo-smoke"
    assert load_config("search_qa_grpo").trainer.run_name == ""  # the full run: runs/RECIPE
    named = load_config("search_qa_grpo", ["trainer.run_name=mine"], smoke=True)
    assert named.trainer.run_name == "mine"


def _train(tmp_path, *extra: str) -> list[str]:
    return [
        "train",
        *TINY,
        f"trainer.out_dir={tmp_path}",
        "trainer.run_name=run",
        "env.num_eval_tasks=1",
        "trainer.steps=1",
        *extra,
        "--smoke",
    ]


def test_resuming_a_run_with_other_settings_is_refused_unless_forced(tmp_path, capsys):
    assert main(_train(tmp_path)) == 0
    capsys.readouterr()
    # a longer run with more logging may resume ...
    assert main(_train(tmp_path, "trainer.steps=2", "trainer.log_trajectories=0")) == 0
    capsys.readouterr()
    # ... another experiment may not
    code = main(_train(tmp_path, "trainer.steps=3", "optim.lr=1e-3", "rollout.group_size=4"))
    err = capsys.readouterr().err
    assert code == 2 and "optim.lr" in err and "rollout.group_size" in err and "--force" in err
    assert "trainer.steps" not in err and len(err.strip().splitlines()) == 1
    assert main([*_train(tmp_path, "trainer.steps=3", "optim.lr=1e-3"), "--force"]) == 0
    assert "resuming from" in capsys.readouterr().out


def test_eval_shows_progress_says_how_to_shrink_and_stops_cleanly(tmp_path, capsys, monkeypatch):
    assert main(_train(tmp_path)) == 0
    capsys.readouterr()
    args = ["eval", "search_qa_grpo", *TINY, "env.num_eval_tasks=3", "rollout.eval_batch_size=2"]
    args += ["rollout.max_turns=1", "rollout.max_tokens_per_turn=4"]
    assert main([*args, "--checkpoint", str(tmp_path / "run")]) == 0
    captured = capsys.readouterr()
    assert "env.num_eval_tasks=N" in captured.err
    assert "eval 2/3" in captured.err and "eval 3/3" in captured.err  # the progress, per batch
    assert json.loads(captured.out)["checkpoint"].endswith("step_000001")

    from agentic_rl.train import collect

    def interrupted(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr(collect, "eval_episodes", interrupted)
    assert main([*args, "--checkpoint", str(tmp_path / "run")]) == 130
    err = capsys.readouterr().err
    assert "interrupted" in err and "Traceback" not in err


def test_a_bad_out_dir_is_one_line_before_the_model_is_built(tmp_path, capsys, monkeypatch):
    _no_build(monkeypatch)
    blocker = tmp_path / "file"
    blocker.write_text("")
    for out_dir, words in ((blocker, "not a directory"), (blocker / "runs", "not a directory")):
        assert main(["train", *TINY, f"trainer.out_dir={out_dir}"]) == 2
        err = capsys.readouterr().err
        assert err.startswith("config error: trainer.out_dir=") and words in err
        assert len(err.strip().splitlines()) == 1
    from agentic_rl.config import checks

    monkeypatch.setattr(checks.os, "access", lambda path, mode: False)  # as if read-only
    assert main(["train", *TINY, f"trainer.out_dir={tmp_path / 'new'}"]) == 2
    assert "cannot be created" in capsys.readouterr().err
    assert main(["train", *TINY, f"trainer.out_dir={tmp_path}"]) == 2
    assert "not writable" in capsys.readouterr().err


def test_a_hub_model_name_says_how_to_download_it(tmp_path, capsys):
    name = "HuggingFaceTB/SmolLM2-135M-Instruct"
    assert main(["train", f"model.name={name}", f"trainer.out_dir={tmp_path}"]) == 2
    err = capsys.readouterr().err
    assert f"huggingface-cli download {name} --local-dir DIR" in err and "model.name=DIR" in err
    assert os.listdir(tmp_path) == []  # nothing written


def test_help_texts():
    parser = build_parser()
    sub = parser._subparsers._group_actions[0].choices  # noqa: SLF001 (argparse's own)
    serve = {a.dest: a for a in sub["serve-retriever"]._actions}  # noqa: SLF001
    assert serve["host"].help and serve["port"].help
    check = {a.dest: a for a in sub["check-env"]._actions}  # noqa: SLF001
    assert "count" in check["tasks"].help
    index_build = sub["index"]._subparsers._group_actions[0].choices["build"]  # noqa: SLF001
    corpus = {a.dest: a for a in index_build._actions}["corpus"]  # noqa: SLF001
    assert '"contents"' in corpus.help and '"title"' in corpus.help and "_id" in corpus.help


def test_a_misspelled_recipe_gets_a_suggestion(capsys):
    assert main(["train", "serch_qa_grpo"]) == 2
    assert "did you mean 'search_qa_grpo'" in capsys.readouterr().err


def test_config_differences_name_the_changed_settings_only():
    from agentic_rl.config.checks import config_differences

    saved = {"optim": {"lr": 1e-5}, "trainer": {"steps": 10, "seed": 0}}
    now = {"optim": {"lr": 2e-5}, "trainer": {"steps": 40, "seed": 0, "new_knob": 1}}
    assert config_differences(saved, now, {"trainer": {"new_knob": 1}}) == [
        "optim.lr (1e-05 -> 2e-05)"  # steps may change; a setting newer than the run: default
    ]
    assert config_differences(saved, now)[1].startswith("trainer.new_knob ('<unset>' -> 1)")
