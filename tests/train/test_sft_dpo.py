"""SFT on trajectory files (only loss-mask-1 tokens train), DPO on pairs, and their commands."""

import copy
import json
import math

import pytest
import torch

from agentic_rl.cli import main
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.model import prefix_sharing
from agentic_rl.model.load import frozen_copy, load_policy, token_logprobs
from agentic_rl.train import sft
from agentic_rl.train.dpo import load_pairs, pair_logps, train_dpo
from agentic_rl.train.sft import (
    TrajectoryFormatError,
    encode_messages,
    load_trajectories,
    record_to_trajectory,
    save_trajectories,
    sft_loss,
    train_sft,
)
from agentic_rl.types import Trajectory

CHAT = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": "Say hi."},
    {"role": "assistant", "content": "Hi there"},
    {"role": "user", "content": "Again."},
    {"role": "assistant", "content": "Hi"},
]


def grads_of(model, ids, mask):
    model.zero_grad()
    ids_t, mask_t = torch.tensor([ids]), torch.tensor([mask], dtype=torch.float32)
    logprobs, _, _ = token_logprobs(model, ids_t, torch.ones_like(ids_t), positions=mask_t > 0)
    sft_loss(logprobs, mask_t).backward()
    return [p.grad.clone() for p in model.parameters()]


def test_sft_trains_only_mask_one_tokens(tiny):
    ids = [11, 12, 13, 14, 15, 16, 17, 18]
    mask = [0, 0, 0, 1, 1, 1, 0, 0]
    base = grads_of(tiny, ids, mask)
    # a different target at a mask-0 position (the trailing observation) changes nothing
    other = grads_of(tiny, ids[:-1] + [999], mask)
    for a, b in zip(base, other, strict=True):
        assert torch.equal(a, b)
    # ... while a different mask-1 target does
    changed = grads_of(tiny, ids[:4] + [999] + ids[5:], mask)
    assert any(not torch.equal(a, b) for a, b in zip(base, changed, strict=True))


def test_sft_micro_batches_give_the_batch_gradient(tiny, monkeypatch):
    """Rows of different lengths and mask sizes: micro-batches of 1 weigh each row's tokens by
    the batch's token count, so one step lands on the same weights as the full batch. (Plain SGD
    in place of AdamW: Adam's first step is ~lr * sign(grad), blind to the gradient's size.)"""
    monkeypatch.setattr(sft, "adamw", lambda params, lr: torch.optim.SGD(params, lr=lr))
    g = torch.Generator().manual_seed(0)
    trajs = []
    for n in (6, 9, 12):
        ids = torch.randint(10, 1000, (n,), generator=g).tolist()
        mask = [0] * 3 + [1] * (n - 3)
        trajs.append(Trajectory(token_ids=ids, loss_mask=mask, logprobs=[0.0] * n, prompt_length=3))
    results = []
    for micro in (0, 1):
        model = copy.deepcopy(tiny)
        out = train_sft(model, trajs, 0, lr=1.0, batch_size=3, micro_batch_size=micro)
        results.append((model, out["last_loss"]))
    (full, loss_full), (micro, loss_micro) = results
    assert loss_micro == pytest.approx(loss_full, rel=1e-5)
    moved = False
    for a, b, p in zip(full.parameters(), micro.parameters(), tiny.parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)
        moved |= not torch.equal(a, p)
    assert moved


def test_sft_shared_prefix_gives_the_plain_step(tiny, monkeypatch):
    """Demos that start with the same instructions (one conversation per fact, Memory-R1's
    warm start): running the common prefix once lands on the same weights as the plain pass."""
    monkeypatch.setattr(sft, "adamw", lambda params, lr: torch.optim.SGD(params, lr=lr))
    g = torch.Generator().manual_seed(1)
    prefix = torch.randint(10, 1000, (20,), generator=g).tolist()
    trajs = []
    for n in (5, 8, 11):
        ids = prefix + torch.randint(10, 1000, (n,), generator=g).tolist()
        mask = [0] * (len(prefix) + 2) + [1] * (n - 2)
        trajs.append(Trajectory(ids, mask, [0.0] * len(ids), prompt_length=len(prefix) + 2))
    forms: list[str] = []
    choose = prefix_sharing.choose_form
    monkeypatch.setattr(
        prefix_sharing,
        "choose_form",
        lambda *a, **k: (lambda out: forms.append(out[0]) or out)(choose(*a, **k)),
    )
    models, losses = [], []
    for share in (False, True):
        model = copy.deepcopy(tiny)
        out = train_sft(model, trajs, 0, lr=1.0, batch_size=3, share_prefix=share)
        models.append(model)
        losses.append(out["last_loss"])
    assert forms and "plain" not in forms  # the prefix did run once
    assert losses[1] == pytest.approx(losses[0], rel=1e-5)
    for a, b in zip(models[0].parameters(), models[1].parameters(), strict=True):
        torch.testing.assert_close(a, b, atol=1e-6, rtol=1e-5)


def test_messages_are_tokenised_with_only_assistant_turns_trained(tokenizer):
    ids, mask = encode_messages(tokenizer, CHAT)
    full = tokenizer.apply_chat_template(CHAT, tokenize=True)
    assert ids == list(full["input_ids"] if hasattr(full, "keys") else full)
    trained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if m])
    assert trained == "Hi there<|im_end|>\nHi<|im_end|>\n"
    untrained = tokenizer.decode([i for i, m in zip(ids, mask, strict=True) if not m])
    assert "Be brief." in untrained and "<|im_start|>assistant\n" in untrained
    assert "Hi there" not in untrained


def test_trajectory_files_round_trip_and_report_bad_lines(tmp_path, tokenizer):
    token_native = Trajectory([1, 2, 3, 4], [0, 0, 1, 1], [0.0] * 4, 2, reward=1.0, task_id="a")
    path = tmp_path / "t.jsonl"
    save_trajectories(path, [token_native])
    with path.open("a") as fh:
        fh.write("\n" + json.dumps({"messages": CHAT}) + "\n")
    loaded = load_trajectories(path, tokenizer)
    assert loaded[0].token_ids == [1, 2, 3, 4] and loaded[0].loss_mask == [0, 0, 1, 1]
    assert loaded[0].prompt_length == 2 and loaded[0].reward == 1.0
    assert loaded[1].token_ids == encode_messages(tokenizer, CHAT)[0]
    for line, message in [
        ("{not json", "t.jsonl:1: not JSON"),
        ('{"token_ids": [1, 2], "loss_mask": [1]}', "not as long as token_ids"),
        ('{"token_ids": [1, 2], "loss_mask": [0, 0]}', "no loss-mask-1 token"),
        ('{"text": "hi"}', "needs 'token_ids'"),
    ]:
        path.write_text(line + "\n")
        with pytest.raises(TrajectoryFormatError, match=message):
            load_trajectories(path, tokenizer)


def _pair(tokenizer, chosen, rejected):
    prompt = [{"role": "user", "content": "Which way to the goal?"}]
    return {
        "chosen": {"messages": [*prompt, {"role": "assistant", "content": chosen}]},
        "rejected": {"messages": [*prompt, {"role": "assistant", "content": rejected}]},
    }


def test_dpo_raises_the_chosen_vs_rejected_margin(tiny, tokenizer, tmp_path):
    path = tmp_path / "pairs.jsonl"
    lines = [
        _pair(tokenizer, "<action>down</action>", "<action>up</action>"),
        _pair(tokenizer, "<action>right</action>", "go left I think"),
    ]
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    pairs = load_pairs(path, tokenizer)
    model, reference = copy.deepcopy(tiny), frozen_copy(tiny)
    result = train_dpo(model, pairs, 0, beta=0.5, lr=3e-3, epochs=15, batch_size=2)
    assert result["first_loss"] == pytest.approx(math.log(2), abs=1e-5)
    assert result["last_loss"] < 0.5 * math.log(2)
    with torch.no_grad():
        pc, pr = pair_logps(model, pairs, 0)
        rc, rr = pair_logps(reference, pairs, 0)
    assert ((pc - rc) - (pr - rr) > 0).all() and result["accuracy"] == 1.0


def test_dpo_against_itself_as_it_starts_matches_dpo_against_a_frozen_copy(
    tiny, tokenizer, tmp_path
):
    """train_dpo's default reference (the policy's own logps, taken before its first update)
    gives the run a frozen copy of the policy gives: the same losses and weights (same path)."""
    lines = [
        _pair(tokenizer, "<action>down</action>", "<action>up</action>"),
        _pair(tokenizer, "<action>right</action>", "go left I think"),
    ]
    path = tmp_path / "pairs.jsonl"
    path.write_text("".join(json.dumps(x) + "\n" for x in lines))
    pairs = load_pairs(path, tokenizer)
    runs = []
    for reference in (None, frozen_copy(tiny)):
        model = copy.deepcopy(tiny)
        kw = {"beta": 0.5, "lr": 3e-3, "epochs": 3, "batch_size": 2, "reference": reference}
        runs.append((train_dpo(model, pairs, 0, **kw), model.state_dict()))
    (own, own_weights), (copied, copied_weights) = runs
    assert own == copied and own["last_loss"] < own["first_loss"]
    assert all(torch.equal(own_weights[k], copied_weights[k]) for k in own_weights)


def test_sft_and_dpo_commands_with_the_tiny_model(tmp_path, capsys):
    data = tmp_path / "expert.jsonl"
    out = tmp_path / "sft"
    code = main(
        [
            "sft",
            "gigpo_gridworld",
            "model.name=tiny",
            "warm_start.num_tasks=4",
            "--out",
            str(out),
            "--save-data",
            str(data),
        ]
    )
    assert code == 0
    summary = json.loads((out / "sft_summary.json").read_text())
    assert summary["trajectories"] == len(data.read_text().splitlines()) > 4  # step samples
    model, _ = load_policy(ModelConfig(name=str(out / "model")))
    assert sum(p.numel() for p in model.parameters()) > 0
    # RL or more SFT can start from it; so can DPO, here on pairs of expert vs a bad step
    records = [json.loads(line) for line in data.read_text().splitlines()]
    bad = dict(records[0], loss_mask=records[0]["loss_mask"])
    bad["token_ids"] = records[0]["token_ids"][:-2] + [28, 29]
    pairs = tmp_path / "pairs.jsonl"
    pairs.write_text(json.dumps({"chosen": records[0], "rejected": bad}) + "\n")
    dpo_out = tmp_path / "dpo"
    args = ["dpo", "gigpo_gridworld", f"model.name={out / 'model'}", "--pairs", str(pairs)]
    assert main([*args, "--out", str(dpo_out)]) == 0
    assert json.loads((dpo_out / "dpo_summary.json").read_text())["pairs"] == 1
    assert (dpo_out / "model" / "config.json").is_file()
    capsys.readouterr()
    (tmp_path / "broken.jsonl").write_text('{"chosen": {}}\n')
    bad_args = [
        "dpo",
        "gigpo_gridworld",
        "model.name=tiny",
        "--pairs",
        str(tmp_path / "broken.jsonl"),
    ]
    assert main(bad_args) == 2
    assert "a pair needs 'chosen' and 'rejected'" in capsys.readouterr().err
    assert main(["sft", "gigpo_gridworld", "model.name=tiny", "--data", "/nope.jsonl"]) == 2


def test_record_without_mask_for_messages_needs_an_assistant_turn(tokenizer):
    with pytest.raises(TrajectoryFormatError, match="no loss-mask-1 token"):
        record_to_trajectory({"messages": CHAT[:2]}, tokenizer, "x")
