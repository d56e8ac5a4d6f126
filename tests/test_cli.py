import subprocess
import sys

from agentic_rl.cli import main


def test_recipes_lists_each_with_a_description(capsys):
    assert main(["recipes"]) == 0
    out = capsys.readouterr().out
    lines = {line.split()[0]: line for line in out.strip().splitlines()}
    assert "search_qa_grpo" in lines and "calculator_grpo" in lines
    assert all(len(line.split(maxsplit=1)) == 2 for line in lines.values())


def test_check_env_passes_for_builtin_envs(capsys):
    for name in ("search_qa", "calculator"):
        assert main(["check-env", name, "--tasks", "5"]) == 0
        assert "all checks passed" in capsys.readouterr().out


def test_bad_input_gives_a_message_and_exit_2(capsys):
    assert main(["train", "no_such_recipe"]) == 2
    assert "unknown recipe 'no_such_recipe'" in capsys.readouterr().err
    assert main(["train", "algo.nmae=grpo"]) == 2
    assert "unknown config key 'algo.nmae'" in capsys.readouterr().err
    assert main(["check-env", "chess"]) == 2
    assert "unknown env 'chess'" in capsys.readouterr().err
    assert main(["train", "model.name=/does/not/exist", "--smoke"]) == 2
    assert "nothing is downloaded" in capsys.readouterr().err


def test_console_script_is_installed():
    out = subprocess.run(
        [sys.executable, "-m", "agentic_rl.cli", "--help"], capture_output=True, text=True
    )
    assert out.returncode == 0
    for command in ("train", "eval", "check-env", "recipes"):
        assert command in out.stdout
