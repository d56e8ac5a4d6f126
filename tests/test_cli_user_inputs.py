"""What a user hands the command line: every bad file, row, env id or option is one line
naming it on stderr, exit code 2, no traceback, and it is found before any model loads."""

from __future__ import annotations

import json

import pytest

from agentic_rl.cli import main

NO_MODEL = "model.name=/does/not/exist"  # would fail at model load: input checks come first
SOLVABLE = "#####\n#@$.#\n#####\n"  # one push right
LONG = "#########\n#@$    .#\n#########\n"  # five pushes


def _run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str]:
    code = main(argv)
    err = capsys.readouterr().err
    assert "Traceback" not in err
    return code, err


@pytest.mark.parametrize(
    ("text", "says"),
    [(None, "no such level file"),
     ("#####\n#@$.#\n#x###\n", "level 1: unknown character 'x'"),
     (SOLVABLE + "\n######\n#@ $ #\n#   .#\n######\n", "level 2 has no solution"),
     ("#####\n#@  #\n#####\n", "level 1: a level needs at least one box")],
)  # fmt: skip
def test_a_bad_level_file_is_one_line_before_the_model_loads(tmp_path, capsys, text, says):
    path = tmp_path / "levels.xsb"
    if text is not None:
        path.write_text(text)
    for argv in (
        ["check-env", "sokoban", f"env.options.level_file={path}"],
        ["train", "ragen_sokoban", f"env.options.level_file={path}", NO_MODEL, "--smoke",
         f"trainer.out_dir={tmp_path / 'runs'}"],
    ):  # fmt: skip
        code, err = _run(argv, capsys)
        assert code == 2 and str(path) in err and says in err
        assert "nothing is downloaded" not in err  # the model was never loaded
    assert not (tmp_path / "runs").exists()


def test_a_level_longer_than_the_step_limit_is_reported_when_tasks_are_made(tmp_path, capsys):
    path = tmp_path / "long.xsb"
    path.write_text(SOLVABLE + "\n" + LONG)
    code, err = _run(
        ["check-env", "sokoban", f"env.options.level_file={path}", "env.options.max_steps=4"],
        capsys,
    )
    assert code == 2
    assert f"{path}: level 2's shortest plan takes 5 moves" in err
    assert "max_steps=4" in err and "env.options.max_steps=5" in err
    assert main(["check-env", "sokoban", f"env.options.level_file={path}"]) == 0  # fits 10


def test_gymnasium_env_ids_are_checked_by_check_env(capsys):
    pytest.importorskip("gymnasium")
    code, err = _run(["check-env", "gym_text", "env.options.env_id=CartPole-v1"], capsys)
    assert code == 2 and "'CartPole-v1' has no text rendering" in err
    code, err = _run(["check-env", "gym_text", "env.options.env_id=NoSuchEnv-v0"], capsys)
    assert code == 2 and "Gymnasium env 'NoSuchEnv-v0'" in err
    code, out = main(["check-env", "gym_text", "env.options.env_id=CliffWalking-v1", "--tasks",
                      "2"]), capsys.readouterr().out  # fmt: skip
    assert code == 0 and "gym_text: all checks passed on 2 tasks" in out


def test_check_env_takes_only_env_overrides(capsys):
    code, err = _run(["check-env", "sokoban", "rollout.max_turns=3"], capsys)
    assert code == 2 and "check-env uses only env.* settings" in err
    code, err = _run(["check-env", "sokoban", "env.options.dim=2"], capsys)
    assert code == 2 and "env.options" in err and "dim must be >= 4" in err


def _rows(path, rows):
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


DOC = "Ada likes tea. Ada was born in Paris. Bob lives in Rome."


def test_memagent_takes_its_documented_jsonl_as_shipped(tmp_path, capsys):
    """The recipe's generated-task options (doc_tokens, hops) are dropped with task files, and
    its warm start plays the user's rows (the expert's facts: sentences holding the answer)."""
    from agentic_rl.config.load import load_config
    from agentic_rl.envs.from_config import make_tasks

    good = _rows(tmp_path / "good.jsonl", [
        {"question": "Where was Ada born?", "answers": ["Paris"], "context": DOC},
        {"question": "Where does Bob live?", "answers": ["Rome"], "context": DOC},
    ])  # fmt: skip
    files = [f"env.train_file={good}", f"env.eval_file={good}"]
    cfg = load_config("memagent", files)
    assert "doc_tokens" not in cfg.env.options and cfg.env.options["memory_tokens"] == 48
    assert cfg.warm_start.num_tasks == 32
    assert [t.fields["context"] for t in make_tasks(cfg, "train")] == [DOC, DOC]
    assert main(["check-env", "memagent", f"env.eval_file={good}"]) == 0
    # an option the user sets on the command line still has to act
    code, err = _run(["train", "memagent", *files, "env.options.hops=2"], capsys)
    assert code == 2 and "env.options.hops is set but does nothing" in err


def test_a_row_without_a_required_field_is_refused_at_load_naming_it(tmp_path, capsys):
    good = {"question": "Where was Ada born?", "answers": ["Paris"], "context": DOC}
    bad = _rows(tmp_path / "bad.jsonl", [good, {"question": "Who?", "answers": ["Bob"]}])
    code, err = _run(
        ["train", "memagent", f"env.train_file={bad}", f"env.eval_file={bad}", NO_MODEL,
         f"trainer.out_dir={tmp_path}"],
        capsys,
    )  # fmt: skip
    assert code == 2
    assert f"{bad}: row 1: missing column 'context', which env memagent needs" in err
    code, err = _run(["check-env", "memagent", f"env.eval_file={tmp_path / 'none.jsonl'}"], capsys)
    assert code == 2 and "env.eval_file: file" in err and "not found" in err


def test_eval_without_a_checkpoint_evaluates_the_starting_model(tmp_path, capsys, tiny, tokenizer):
    model_dir = tmp_path / "model"
    tiny.save_pretrained(model_dir)
    tokenizer.save_pretrained(model_dir)
    argv = [
        "eval",
        "calculator_grpo",
        f"model.name={model_dir}",
        "env.num_eval_tasks=2",
        "rollout.eval_batch_size=2",
        "rollout.max_turns=1",
        "rollout.max_tokens_per_turn=4",
    ]
    assert main(argv) == 0  # fmt: skip
    captured = capsys.readouterr()
    result = json.loads(captured.out)
    assert result["checkpoint"] is None and result["model"] == str(model_dir)
    assert "evaluating the starting model" in captured.err
    code, err = _run(["eval", "calculator_grpo", "--checkpoint", str(tmp_path / "none")], capsys)
    assert code == 2 and "no complete checkpoint there" in err
