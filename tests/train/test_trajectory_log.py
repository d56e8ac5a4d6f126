"""The trajectory file: what a record holds, sampling, kill and resume, and a real tiny run."""

import gzip
import json
from pathlib import Path

import torch

from agentic_rl.config.load import load_config
from agentic_rl.learner.batch import Episodes, collate_episodes
from agentic_rl.train.loop import train
from agentic_rl.train.trajectory_log import (
    TRAJECTORY_FILE,
    TrajectoryLog,
    read_trajectories,
    scan_trajectories,
    truncate_trajectories,
)
from agentic_rl.types import Action, Trajectory


class CountingTokenizer:
    """decode([id]) -> "<id>", counting the calls."""

    def __init__(self) -> None:
        self.calls = 0

    def decode(self, ids):
        self.calls += 1
        return "".join(f"<{i}>" for i in ids)


class ToolFormat:
    """Every turn that mentions <7> is a call of tool `search`; others answer."""

    def parse(self, text, finish_reason):
        if "<7>" in text:
            return Action(kind="tool", name="search", arguments={"query": "q"}, raw=text)
        return Action(kind="answer", text="a", raw=text)


def trajectory(group: str, reward: float, shift: int = 0) -> Trajectory:
    # prompt [0, 3), turn 1 [3, 6), observation [6, 8), turn 2 [8, 10)
    ids = [1, 2, 3, 7, 5 + shift, 6, 20, 21, 9, 10]
    mask = [0, 0, 0, 1, 1, 1, 0, 0, 1, 1]
    return Trajectory(
        token_ids=ids,
        loss_mask=mask,
        logprobs=[-0.5 * m for m in mask],
        prompt_length=3,
        turn_spans=[(3, 6), (8, 10)],
        step_rewards=[0.0, reward],
        reward=reward,
        group_id=group,
        task_id=group.split(":")[-1],
        token_versions=[v if m else -1 for v, m in zip([0] * 10, mask, strict=True)],
        metrics={"success": float(reward > 0), "tool_calls": 1.0},
    )


def step_episodes() -> Episodes:
    """Two groups of two; the second group all-equal (a dynamic-sampling filter drops it)."""
    trajs = [
        trajectory("1:a", 1.0),
        trajectory("1:a", 0.0, 1),
        trajectory("1:b", 0.0),
        trajectory("1:b", 0.0),
    ]
    return Episodes([[t] for t in trajs], [None] * 4)


def test_a_step_record_holds_tokens_turns_and_the_batch(tmp_path):
    tok = CountingTokenizer()
    log = TrajectoryLog(tmp_path, tok, ToolFormat())
    generated = step_episodes()
    kept = generated.select([0, 1])
    batch = collate_episodes(kept.samples, pad_token_id=0)
    batch.advantages = torch.tensor([[0.7] * 10, [-0.7] * 10]) * batch.loss_mask
    batch.ref_logprobs = torch.full((2, 10), -0.25) * batch.loss_mask
    assert log.write_step(1, generated, kept, batch) == 4

    records = list(read_trajectories(tmp_path))
    assert [r["trained"] for r in records] == [True, True, False, False]
    first = records[0]
    assert first["step"] == 1 and first["split"] == "train" and first["group_id"] == "1:a"
    assert first["ids"] == generated.samples[0][0].token_ids
    assert first["pieces"][:4] == ["<1>", "<2>", "<3>", "<7>"]
    assert first["mask"] == [0, 0, 0, 1, 1, 1, 0, 0, 1, 1] and first["train_mask"] is None
    assert first["lp"][3] == -0.5
    assert first["adv"] == [0.7 * m for m in first["mask"]]
    assert records[1]["adv"][3] == -0.7
    assert first["ref_lp"][3] == -0.25
    assert first["learner_lp"] is None  # this batch has none
    assert first["versions"] == [-1, -1, -1, 0, 0, 0, -1, -1, 0, 0]
    assert first["reward"] == 1.0 and first["step_rewards"] == [0.0, 1.0]
    assert first["success"] == 1.0
    turn1, turn2 = first["turns"]
    assert turn1["span"] == [3, 6] and turn1["obs"] == [6, 8] and turn1["reward"] == 0.0
    assert turn1["action"] == {"kind": "tool", "name": "search", "arguments": {"query": "q"}}
    assert turn2["span"] == [8, 10] and turn2["obs"] is None and turn2["action"]["kind"] == "answer"
    assert records[2]["adv"] is None and records[2]["ref_lp"] is None
    # each distinct id decoded once, for the whole run
    distinct = {i for samples in generated.samples for t in samples for i in t.token_ids}
    assert tok.calls == len(distinct)
    log.write_eval(1, "eval", generated.samples)
    assert tok.calls == len(distinct)
    evals = [r for r in read_trajectories(tmp_path) if r["split"] == "eval"]
    assert len(evals) == 4 and all(r["trained"] is None and r["adv"] is None for r in evals)


def test_the_learners_mask_is_kept_where_it_differs(tmp_path):
    log = TrajectoryLog(tmp_path, CountingTokenizer())
    generated = step_episodes()
    batch = collate_episodes(generated.samples, pad_token_id=0)
    batch.advantages = torch.zeros(4, 10)
    batch.loss_mask[1] = 0  # e.g. DAPO's overlong filter dropped it from the loss
    log.write_step(1, generated, generated, batch)
    records = list(read_trajectories(tmp_path))
    assert records[0]["train_mask"] is None
    assert records[1]["train_mask"] == [0] * 10


def test_a_sample_is_whole_groups_seeded_by_the_step(tmp_path):
    log = TrajectoryLog(tmp_path, CountingTokenizer(), per_step=2, seed=3)
    generated = step_episodes()
    chosen = [log._sample(step, generated.samples) for step in range(1, 9)]
    assert all(c in ([0, 1], [2, 3]) for c in chosen)  # one whole group of the two
    assert len({tuple(c) for c in chosen}) == 2  # the step changes which
    assert chosen == [log._sample(step, generated.samples) for step in range(1, 9)]
    log.write_step(1, generated)
    assert len(list(read_trajectories(tmp_path))) == 2
    everything = TrajectoryLog(tmp_path / "all", CountingTokenizer(), per_step=64)
    assert everything._sample(1, generated.samples) == [0, 1, 2, 3]


def test_nothing_is_written_with_zero(tmp_path):
    log = TrajectoryLog(tmp_path, CountingTokenizer(), per_step=0)
    assert log.write_step(1, step_episodes()) == 0
    assert not (tmp_path / TRAJECTORY_FILE).exists()


def test_a_killed_writer_and_a_resume(tmp_path):
    path = tmp_path / TRAJECTORY_FILE
    log = TrajectoryLog(tmp_path, CountingTokenizer())
    for step in (1, 2, 3):
        log.write_step(step, step_episodes())
    # killed in the middle of writing step 4: half a gzip member at the end
    member = gzip.compress(b'{"step": 4, "split": "train"}\n' * 50)
    with path.open("ab") as f:
        f.write(member[: len(member) // 2])
    assert [s for s, _ in scan_trajectories(path)] == [1] * 4 + [2] * 4 + [3] * 4

    # the last checkpoint was step 2: a resumed run drops step 3 and the broken tail
    resumed = TrajectoryLog(tmp_path, CountingTokenizer(), resume_step=2)
    resumed.write_step(3, step_episodes())
    steps = [r["step"] for r in read_trajectories(path)]
    assert steps == [1] * 4 + [2] * 4 + [3] * 4

    # a fresh run (no checkpoint) starts the file empty
    TrajectoryLog(tmp_path, CountingTokenizer(), resume_step=None)
    assert list(read_trajectories(path)) == []
    assert truncate_trajectories(tmp_path / "missing.jsonl.gz", 3) == 0


def test_read_selects_records_before_parsing(tmp_path):
    log = TrajectoryLog(tmp_path, CountingTokenizer())
    for step in (1, 2):
        log.write_step(step, step_episodes())
    log.write_eval(2, "eval", step_episodes().samples)
    picked = list(read_trajectories(tmp_path, keep=lambda i, step, split: split == "eval"))
    assert len(picked) == 4 and {r["split"] for r in picked} == {"eval"}


# ---------------------------------------------------------------------------------------------
# a real run on the tiny model


def tiny_cfg(out: Path, steps: int):
    return load_config(
        None,
        [
            "model.name=tiny",
            "algo.entropy_coef=0.01",
            "trainer.progress=false",
            "trainer.tensorboard=false",
            f"trainer.out_dir={out}",
            "trainer.run_name=run",
            f"trainer.steps={steps}",
        ],
        smoke=True,
    )


def test_a_run_logs_every_step_and_evaluation_and_resumes_without_duplicates(tmp_path):
    train(tiny_cfg(tmp_path / "a", 2))
    train(tiny_cfg(tmp_path / "b", 1))
    run_b = tmp_path / "b" / "run"
    # a killed attempt at step 2 left its records behind (the checkpoint is at step 1)
    with (run_b / TRAJECTORY_FILE).open("ab") as f:
        f.write(gzip.compress(b'{"step": 2, "split": "train", "killed": true}\n'))
    train(tiny_cfg(tmp_path / "b", 2))  # resumes from step 1

    a = list(read_trajectories(tmp_path / "a" / "run"))
    b = list(read_trajectories(run_b))
    keys = [(r["step"], r["split"]) for r in a]
    assert sorted(set(keys)) == [
        (0, "eval_before"),
        (0, "eval_warm_start"),
        (1, "train"),
        (2, "eval"),
        (2, "train"),
    ]
    cfg = tiny_cfg(tmp_path / "a", 2)
    per_step = cfg.rollout.tasks_per_step * cfg.rollout.group_size
    assert keys.count((1, "train")) == per_step
    assert keys.count((2, "eval")) == cfg.env.num_eval_tasks
    for r in a:
        n = len(r["ids"])
        assert len(r["pieces"]) == len(r["mask"]) == len(r["lp"]) == n
        assert r["turns"] and r["turns"][0]["span"][0] == r["prompt_length"]
        if r["split"] == "train" and r["trained"]:
            assert len(r["adv"]) == n
    assert not any(r.get("killed") for r in b)
    # the resumed run logged what the uninterrupted one did (b also wrote its step-1 eval)
    assert [r for r in b if r["split"] == "train"] == [r for r in a if r["split"] == "train"]
    assert json.dumps([r for r in b if (r["step"], r["split"]) == (2, "eval")]) == json.dumps(
        [r for r in a if (r["step"], r["split"]) == (2, "eval")]
    )
