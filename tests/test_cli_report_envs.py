"""`agentic-rl envs` lists every registered env; `agentic-rl report` is a command."""

from agentic_rl.cli import build_parser, main
from agentic_rl.envs.registry import env_names


def test_envs_lists_every_env(capsys):
    assert main(["envs"]) == 0
    out = capsys.readouterr().out
    for name in env_names():
        assert f"\n{name} " in "\n" + out
    assert "agentic-rl check-env NAME" in out


def test_report_is_a_command():
    args = build_parser().parse_args(["report", "runs/a", "runs/b", "--out", "r.html"])
    assert args.runs == ["runs/a", "runs/b"] and args.out == "r.html"
    assert args.max_trajectories == 400
