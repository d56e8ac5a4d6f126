"""One process of the FSDP2 tests (tests/scale/test_fsdp.py starts two on gloo, as torchrun would).

Every process builds the same tiny model and batch, runs the single-process update itself (the
reference numbers) and the sharded update, and rank 0 writes what the test asserts to
OUT/results.json: per case the largest differences, and a sharded checkpoint for the resume and
export tests.

    RANK=0 WORLD_SIZE=2 MASTER_ADDR=127.0.0.1 MASTER_PORT=29500 python tests/scale/fsdp_worker.py OUT
"""

from __future__ import annotations

import copy
import json
import os
import sys
from pathlib import Path

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.tensor import DTensor

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.checkpoint.sharded import load_sharded_checkpoint, save_sharded_checkpoint
from agentic_rl.config.load import load_config
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.learner.advantages import compute_advantages
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import forward_no_grad, update
from agentic_rl.model.critic import Critic
from agentic_rl.model.load import ValueHead, frozen_copy, load_tokenizer, tiny_model
from agentic_rl.scale.fsdp import DataParallel, ShardedGenerator, init_process_group
from agentic_rl.types import SamplingParams, Trajectory

CASES = {
    # KL to a sharded reference + entropy; 5 rows over 2 processes in micro-batches of 2, so
    # rank 1 runs a padding micro-batch
    "grpo_kl": ["algo.kl_coef=0.05", "algo.entropy_coef=0.01", "optim.micro_batch_size=2"],
    # a sharded value head, two epochs (a real ratio), gradients reduced once per batch
    "ppo_defer": [
        "algo.name=ppo",
        "algo.epochs=2",
        "optim.micro_batch_size=1",
        "learner.strategy=fsdp2",
        "learner.defer_grad_sync=true",
    ],
    # a separate critic (its own backbone, sharded per layer like the policy; its own clipping)
    "ppo_separate": ["algo.name=ppo", "algo.critic=separate", "optim.micro_batch_size=2"],
    # no clipping: the gradient norm comes from the sharded gradients; layers recomputed in
    # the backward pass (activation checkpointing inside FSDP units)
    "noclip": [
        "optim.max_grad_norm=0",
        "optim.micro_batch_size=3",
        "model.gradient_checkpointing=true",
    ],
}


def trajectories() -> list[Trajectory]:
    g = torch.Generator().manual_seed(0)
    out = []
    for i, reward in enumerate([1.0, 0.0, 0.5, 1.0, 0.0]):
        length = 7 + 3 * i
        ids = torch.randint(10, 1000, (length,), generator=g).tolist()
        mask = [0, 0, 0] + [1] * (length - 3)
        mask[5] = 0  # an observation token inside the response
        logprobs = [-1.5 * m for m in mask]
        turns = [(3, length)]
        out.append(
            Trajectory(ids, mask, logprobs, 3, turns, [reward], reward, group_id=f"g{i // 3}")
        )
    return out


def full(tensor: torch.Tensor) -> torch.Tensor:
    return tensor.full_tensor() if isinstance(tensor, DTensor) else tensor


def maxdiff(a: torch.Tensor | None, b: torch.Tensor | None) -> float:
    if a is None or b is None:
        return 0.0 if a is None and b is None else float("inf")
    return float((full(a).detach() - full(b).detach()).abs().max())


def models(cfg, base: nn.Module, dp: DataParallel | None):
    policy = copy.deepcopy(base)
    if cfg.model.gradient_checkpointing:  # as models.load_policy does
        policy.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    reference = frozen_copy(base) if cfg.algo.kl_coef > 0 else None
    value_head = None
    if cfg.algo.name == "ppo":
        value_head = ValueHead(base.config.hidden_size)
        if cfg.algo.critic == "separate":
            value_head = Critic(base)
        with torch.random.fork_rng():
            torch.manual_seed(3)
            head = value_head.head if isinstance(value_head, Critic) else value_head
            nn.init.normal_(head.proj.weight, std=0.1)
    if dp is not None:
        policy = dp.shard_lm(policy)
        reference = dp.shard_lm(reference) if reference is not None else None
        value_head = dp.shard_module(value_head) if value_head is not None else None
    params = list(policy.parameters()) + list(value_head.parameters() if value_head else [])
    return policy, reference, value_head, torch.optim.AdamW(params, lr=1e-3)


def prepare(cfg, policy, reference, value_head, dp):
    batch = collate(trajectories(), 0)
    chunk, micro = cfg.model.logprob_chunk_size, cfg.optim.micro_batch_size
    if reference is not None:
        batch.ref_logprobs, _ = forward_no_grad(reference, batch, chunk, micro, dp=dp)
    if value_head is not None:
        _, batch.old_values = forward_no_grad(policy, batch, chunk, micro, value_head, dp)
    compute_advantages(batch, cfg.algo)
    return batch


def named(policy: nn.Module, value_head: nn.Module | None) -> dict[str, torch.Tensor]:
    lm = policy.lm if hasattr(policy, "lm") else policy
    params = dict(lm.named_parameters())
    params.update({f"value_head.{k}": v for k, v in (value_head or nn.Module()).named_parameters()})
    return params


def run_case(name, overrides, base, rank, world_size, out) -> dict:
    # fsdp2 never packs or shares the prompt (every process must run the same forwards), so
    # the single-process reference runs the plain forward too: compare like with like
    cfg = load_config(None, ["model.name=tiny", "model.share_prefix=false", *overrides])
    dp = DataParallel(cfg.learner, rank, world_size, torch.device("cpu"))
    single = models(cfg, base, None)
    sharded = models(cfg, base, dp)
    if isinstance(sharded[2], Critic):  # as start_from_policy after a warm start (no-op here)
        sharded[2].copy_backbone_from(sharded[0])
    result: dict = {}
    batches = [prepare(cfg, *m[:3], d) for m, d in ((single, None), (sharded, dp))]
    for field in ("ref_logprobs", "old_values", "advantages"):
        result[field] = maxdiff(getattr(batches[0], field), getattr(batches[1], field))
    metrics = [
        update(m[0], m[3], b, cfg, m[2], d)
        for m, b, d in ((single, batches[0], None), (sharded, batches[1], dp))
    ]
    result["metrics"] = metrics
    one, two = named(single[0], single[2]), named(sharded[0], sharded[2])
    assert one.keys() == two.keys(), set(one) ^ set(two)
    result["grads"] = max(maxdiff(one[k].grad, two[k].grad) for k in one)
    result["weights"] = max(maxdiff(one[k], two[k]) for k in one)
    result["moved"] = max(maxdiff(one[k], p) for k, p in named(base, None).items())
    if name in ("ppo_defer", "ppo_separate"):
        result.update(check_resume(cfg, base, dp, sharded, batches[1], out))
    if name == "grpo_kl":
        result.update(check_generator(base, dp, single[0], sharded[0]))
    return result


def check_resume(cfg, base, dp, trained, batch, out) -> dict:
    """Save, load into fresh sharded models, take one more step with both: same weights."""
    policy, _, value_head, optimizer = trained
    run = out / ("run" if cfg.algo.critic == "shared" else "run_critic")
    if dp.is_main:
        run.mkdir(parents=True, exist_ok=True)
        (run / "config.json").write_text(json.dumps(cfg.to_dict()))
    extra = {"value_head": value_head}
    path = save_sharded_checkpoint(dp, run, 1, policy, optimizer, None, {"note": "x"}, extra)
    weights = dp.full_state_dict(policy)
    if dp.is_main:
        torch.save(weights, run / "full_weights.pt")  # one file per case: they run in turn
    fresh_policy, _, fresh_head, fresh_opt = models(cfg, base, dp)
    state = load_sharded_checkpoint(
        dp, path, fresh_policy, fresh_opt, extra_modules={"value_head": fresh_head}
    )
    a, b = named(policy, value_head), named(fresh_policy, fresh_head)
    loaded = max(maxdiff(a[k], b[k]) for k in a)
    sa, sb = optimizer.state_dict()["state"], fresh_opt.state_dict()["state"]
    moments = max(maxdiff(sa[k]["exp_avg_sq"], sb[k]["exp_avg_sq"]) for k in sa)
    update(policy, optimizer, batch, cfg, value_head, dp)
    update(fresh_policy, fresh_opt, batch, cfg, fresh_head, dp)
    a, b = named(policy, value_head), named(fresh_policy, fresh_head)
    return {
        "checkpoint": str(path),
        "trainer_state": state,
        "loaded": loaded,
        "moments": moments,
        "resumed_step": max(maxdiff(a[k], b[k]) for k in a),
        "optimizer_entries": len(sa),
    }


def check_generator(base, dp, single_policy, sharded_policy) -> dict:
    """The generator's full copy after a sync equals the single-process update; the same seed
    samples differently in each process."""
    tokenizer = load_tokenizer(ModelConfig(name="tiny"))
    generator = ShardedGenerator(HFGenerator(copy.deepcopy(base), tokenizer), sharded_policy, dp)
    stale = maxdiff(
        generator.model.model.embed_tokens.weight, single_policy.model.embed_tokens.weight
    )
    generator.update_weights(sharded_policy.state_dict())
    synced = max(
        maxdiff(p, q)
        for p, q in zip(generator.model.parameters(), single_policy.parameters(), strict=True)
    )
    params = SamplingParams(max_new_tokens=6, temperature=1.0, seed=7)
    sampled = generator.generate([[1, 2, 3]], params)[0].token_ids
    every = [None] * dp.world_size
    dist.all_gather_object(every, sampled)
    tasks, groups = ["a", "b", "c", "d", "e"], ["g0", "g0", "g1", "g2", "g2"]
    mine = dp.my_share(groups)
    played = dp.gather_episodes(mine, [[f"{tasks[i]}@{dp.rank}"] for i in mine], len(tasks))
    everyone = [None] * dp.world_size
    dist.all_gather_object(everyone, played)
    return {
        "stale": stale,
        "synced": synced,
        "samples": every,
        "played": played,
        "played_everywhere": all(p == played for p in everyone),
    }


def main() -> None:
    out = Path(sys.argv[1])
    rank, world_size, _ = init_process_group()
    torch.manual_seed(rank)  # different default RNG per process: nothing may depend on it
    vocab = len(load_tokenizer(ModelConfig(name="tiny")))
    base = tiny_model(vocab, seed=0)
    base.config.use_cache = False
    results: dict = {"world_size": world_size}
    for name, overrides in CASES.items():
        results[name] = run_case(name, overrides, base, rank, world_size, out)
    if rank == 0:
        (out / "results.json").write_text(json.dumps(results, indent=1))
    dist.barrier()
    dist.destroy_process_group()
    # Every collective has completed (the barrier) and the results are written. Leave without
    # interpreter finalisation: gloo's worker threads may still hold tensors then, and their
    # destruction during teardown now and then aborts a finished process ("terminate called
    # without an active exception"; seen once in ~10 runs of this worker under the full suite).
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
