"""The MiniWoB++ suite through `agentic-rl eval`: `env.options.tasks=all` names the benchmark's
task set, and the evaluation reports the success of every task page (`env/success@TASK`,
averaged over that task's episodes) beside the overall success. Tested on a small slice, with
a scripted policy that solves the tasks that have an expert and gives up on the others, so
each number is known. Real headless Chromium, marked `browser`."""

from __future__ import annotations

import importlib.util
import json

import pytest

from agentic_rl.cli import main
from agentic_rl.envs.browser.driver import browser_available
from agentic_rl.envs.browser.miniwob import MiniWoBEnv
from agentic_rl.envs.browser.suite import make_miniwob_tasks, suite_names
from agentic_rl.model.tokens import encode_text
from agentic_rl.train import collect
from agentic_rl.types import Action, Completion

needs_browser = pytest.mark.skipif(
    bool(browser_available()) or importlib.util.find_spec("miniwob") is None,
    reason=browser_available() or "the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)
SLICE = ["click-button", "click-tab-2", "enter-text"]  # two with an expert, one without


def expert_or_give_up(tokenizer):
    """An Actor: the scripted expert's turn where the task has one, else `<answer>`."""

    def act(episodes, budgets, turn):
        out = []
        for ep in episodes:
            text = ep.env.expert_turn() if ep.task.fields["has_expert"] else "<answer>done</answer>"
            ids = encode_text(tokenizer, text)
            out.append(Completion(ids, [-1.0] * len(ids), "stop", text))
        return out

    return act


@pytest.mark.browser
@needs_browser
def test_the_first_step_reports_the_task_and_the_last_its_success():
    env = MiniWoBEnv()
    env.reset(make_miniwob_tasks("eval", 1, tasks="enter-text")[0], 0)
    steps = []
    for _ in range(3):
        steps.append(
            env.step(
                Action("tool", name="action", arguments={"actions": env.expert_action().render()})
            )
        )
        if steps[-1].terminated:
            break
    values = [s.info.get("env/success@enter-text") for s in steps]
    assert values == [0.0, 1.0]  # typed, then Submit: summed over the steps, the success


@pytest.mark.browser
@needs_browser
def test_eval_reports_the_success_of_every_task_of_a_slice(capsys, monkeypatch, tokenizer):
    assert len(suite_names()) >= 100  # `all`: the whole suite; here a slice of it
    monkeypatch.setattr(collect, "policy_actor", lambda *a, **k: expert_or_give_up(tokenizer))
    args = [
        "eval",
        "ui_tars",
        "model.name=tiny",
        f"env.options.tasks={','.join(SLICE)}",
        "env.num_eval_tasks=6",  # two pages of each task
        "rollout.eval_batch_size=6",
        "rollout.max_turns=3",
        "trainer.progress=false",
    ]
    assert main(args) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["episodes"] == 6.0
    per_task = {k: v for k, v in result.items() if k.startswith("env/success@")}
    assert per_task == {
        "env/success@click-button": 1.0,
        "env/success@click-tab-2": 0.0,
        "env/success@enter-text": 1.0,
    }
    assert result["success"] == pytest.approx(4 / 6)  # the mean over the tasks: equal counts
