"""The user's own task files (env.train_file / env.eval_file) and reward function (env.reward_fn):
checked at load, used where tasks are made and where episode rewards are set."""

from __future__ import annotations

import json

import pytest

from agentic_rl.config.load import load_config
from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.from_config import make_tasks
from agentic_rl.logging import read_metrics
from agentic_rl.rewards.custom import RewardFnError, apply_reward_fn, load_reward_fn, score
from agentic_rl.train.loop import train
from agentic_rl.types import Task, Trajectory

ROWS = [  # Search-R1 layout (nq_search.py), and a plain row
    {
        "id": f"nq-{i}",
        "question": f"who wrote book number {i}?",
        "golden_answers": [f"author {i}"],
        "data_source": "nq",
        "reward_model": {"style": "rule", "ground_truth": {"target": [f"author {i}"]}},
        "extra_info": {"split": "train", "index": i},
    }
    for i in range(6)
] + [{"question": "capital of France?", "answers": ["Paris"]}]

# A reward function as a user would write it, in their own file: TRL's shape.
REWARDS_PY = """
CALLS = []


def quarter(completions, answers, data_source, **kwargs):
    assert len(completions) == len(answers) == len(data_source) == len(kwargs["task_id"])
    assert all(isinstance(c, str) for c in completions)
    CALLS.append({"n": len(completions), "answers": answers, "sources": data_source})
    return [0.25] * len(completions)


def wrong_length(completions, **kwargs):
    return [1.0]


NOT_A_FUNCTION = 3
"""


@pytest.fixture
def files(tmp_path):
    train_file, eval_file = tmp_path / "train.jsonl", tmp_path / "test.jsonl"
    train_file.write_text("".join(json.dumps(row) + "\n" for row in ROWS))
    eval_file.write_text("".join(json.dumps(row) + "\n" for row in ROWS[:2]))
    rewards = tmp_path / "my_rewards.py"
    rewards.write_text(REWARDS_PY)
    return train_file, eval_file, rewards


def task_files(files):
    # Built-in experts read fields of generated tasks: no warm start on the user's rows.
    return [f"env.train_file={files[0]}", f"env.eval_file={files[1]}", "warm_start.num_tasks=0"]


def test_tasks_come_from_the_users_files(files):
    cfg = load_config("search_qa_grpo", [*task_files(files), "env.num_train_tasks=5"])
    train_tasks, eval_tasks = make_tasks(cfg, "train"), make_tasks(cfg, "eval")
    assert [t.task_id for t in train_tasks] == [f"nq-{i}" for i in range(5)]  # first 5 rows
    assert train_tasks[0].prompt == "who wrote book number 0?"
    assert train_tasks[0].answers == ["author 0"] and train_tasks[0].fields["data_source"] == "nq"
    assert [t.task_id for t in eval_tasks] == ["nq-0", "nq-1"]
    # Without files, the generated tasks, as before.
    assert make_tasks(load_config("search_qa_grpo"), "eval")[0].task_id != "nq-0"


def test_eval_file_alone_keeps_generated_training_tasks(files):
    cfg = load_config("search_qa_grpo", [f"env.eval_file={files[1]}"])
    assert [t.task_id for t in make_tasks(cfg, "eval")] == ["nq-0", "nq-1"]
    assert make_tasks(cfg, "train")[0].task_id != "nq-0"


def test_a_bad_row_names_the_key_file_and_row(files, tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"question": "no answers here"}) + "\n")
    cfg = load_config("search_qa_grpo", [*task_files((bad, files[1]))])
    with pytest.raises(ConfigError, match=f"env.train_file: {bad}: row 0: missing gold answers"):
        make_tasks(cfg, "train")


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            ["env.train_file=/no/such/file.jsonl"],
            "env.train_file: file /no/such/file.jsonl not found",
        ),
        (["env.eval_file={rewards}"], "env.eval_file: .*my_rewards.py is not a .jsonl, .json or"),
        (["env.train_file={train}"], "env.train_file is set but env.eval_file is not"),
        (
            ["env.name=math_tool", "env.train_file={train}", "env.eval_file={eval}"]
            + ["env.options={{categories: [arithmetic]}}", "env.topk=3"],
            "env.options.categories is set but does nothing: it only shapes generated tasks",
        ),
        (
            ["env.train_file={train}", "env.eval_file={eval}", "warm_start.num_tasks=4"],
            "warm_start.num_tasks: env.name=search_qa's scripted expert needs the fields",
        ),
        (["env.reward_fn=my_rewards.quarter"], "must be written 'package.module:function'"),
        (["env.reward_fn=no_such_pkg_xq.r:fn"], "cannot import 'no_such_pkg_xq.r'.*PYTHONPATH"),
        (["env.reward_fn=/no/such/rewards.py:fn"], "file /no/such/rewards.py not found"),
        (["env.reward_fn={rewards}:nope"], "my_rewards.py has no 'nope'"),
        (["env.reward_fn={rewards}:NOT_A_FUNCTION"], "is not callable \\(an int\\)"),
        (["env.reward_fn={rewards}:quarter", "env.reward_mode=max"], "env.reward_mode: 'max'"),
        (["env.reward_mode=add"], "env.reward_mode is set but does nothing"),
        (
            ["env.reward_fn={rewards}:quarter", "filters.ttrl_vote_samples=4"],
            "env.reward_fn .* not supported with filters.ttrl_vote_samples",
        ),
    ],
)
def test_bad_settings_fail_at_load(files, overrides, message):
    names = {"train": files[0], "eval": files[1], "rewards": files[2]}
    overrides = [text.format(**names) for text in overrides]
    with pytest.raises(ConfigError, match=message):
        load_config("search_qa_grpo", ["warm_start.num_tasks=0", *overrides])


def test_reward_fn_from_an_importable_module(files, monkeypatch):
    monkeypatch.syspath_prepend(str(files[2].parent))
    cfg = load_config("search_qa_grpo", ["env.reward_fn=my_rewards:quarter"])
    assert load_reward_fn(cfg.env.reward_fn).__name__ == "quarter"


def episode(reward, text="<answer>x</answer>"):
    sample = Trajectory([1, 2], [0, 1], [0.0, -0.5], 1, reward=reward, completion_text=text)
    return [sample]


def test_apply_replaces_or_adds_and_passes_task_columns(files):
    spec = f"{files[2]}:quarter"
    tasks = [
        Task("a", "q1", ["x"], {"data_source": "nq"}),
        Task("b", "q2", ["y", "z"], {"data_source": "hotpotqa", "hops": 2}),
    ]
    episodes = [episode(1.0), episode(-0.1)]
    apply_reward_fn(spec, "replace", tasks, episodes)
    assert [samples[0].reward for samples in episodes] == [0.25, 0.25]
    apply_reward_fn(spec, "add", tasks, episodes)
    assert [samples[0].reward for samples in episodes] == [0.5, 0.5]
    call = load_reward_fn(spec).__globals__["CALLS"][-1]
    assert call == {"n": 2, "answers": [["x"], ["y", "z"]], "sources": ["nq", "hotpotqa"]}
    with pytest.raises(RewardFnError, match="returned 1 rewards for 2 completions"):
        score(f"{files[2]}:wrong_length", ["a", "b"], tasks)


def test_smoke_training_on_a_users_jsonl_with_a_search_env_and_reward_fn(files, tmp_path):
    spec = f"{files[2]}:quarter"
    overrides = [
        *task_files(files),
        f"env.reward_fn={spec}",
        "model.name=tiny",
        "trainer.steps=1",
        "trainer.progress=false",
        f"trainer.out_dir={tmp_path / 'out'}",
        "trainer.run_name=run",
    ]
    cfg = load_config("search_qa_grpo", overrides, smoke=True)
    assert cfg.env.name == "search_qa"
    calls = load_reward_fn(spec).__globals__["CALLS"]
    calls.clear()
    summary = train(cfg)
    assert summary["before"]["reward"] == summary["after"]["reward"] == 0.25  # replaced
    rows = [r for r in read_metrics(tmp_path / "out" / "run" / "metrics.jsonl")]
    assert [r["train/reward"] for r in rows if "train/reward" in r] == [0.25]
    # Training episodes were scored on rows of the train file, evaluation on the eval file.
    golds = {a for call in calls for answers in call["answers"] for a in answers}
    assert golds <= {row.get("golden_answers", row.get("answers"))[0] for row in ROWS}
    assert {"author 0", "author 1"} <= golds
    assert all(source in ("nq", None) for call in calls for source in call["sources"])
