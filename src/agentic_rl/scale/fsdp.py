"""Data-parallel training with torch FSDP2 under torchrun (`learner.strategy=fsdp2`).

    torchrun --nproc_per_node=2 -m agentic_rl.cli train RECIPE learner.strategy=fsdp2

One process per device: gloo on CPU, NCCL on GPU (one GPU per process). How a step runs:

- Sharding. The policy, the frozen reference and the PPO critic are sharded with FSDP2
  (`fully_shard`): every decoder layer is one unit, and a root unit (`CausalLMRoot`) holds the
  rest (embeddings, final norm, output head; tied weights stay tied). A shared value head is
  one unit; a separate critic (algo.critic=separate) is sharded like the policy. Parameters, gradients and
  AdamW state live as shards; a unit is all-gathered for its forward and backward only.
- Generation needs full weights. Each process keeps a full, unsharded copy of the policy for its
  generator and refreshes it after every update by all-gathering the shards one tensor at a time
  (`ShardedGenerator.update_weights`, which the trainer's weight sync calls, as for any engine
  holding its own copy). Generating on the sharded model instead was rejected: every forward of
  a sharded unit is a collective, and processes decode different episodes for different numbers
  of steps, so they would deadlock. The price is one full copy of the weights per process; it
  lives on the process's device (trainer.device: its GPU under NCCL, where the HF generator
  then samples; the CPU under gloo). The vLLM backend is not wired to fsdp2 yet: the config
  refuses the combination.
- Rollouts are data parallel. Each process plays a contiguous share of each rollout batch's
  groups (a group is never split) and then all processes exchange their episodes, so batch
  filters, advantages and loss normalisers see the global batch, identically everywhere.
- The update. Each process runs every world_size-th row of the length-sorted batch in
  micro-batches of optim.micro_batch_size (gradient accumulation; one optimiser step per batch).
  Losses are normalised by the global counts and weighted by world_size because FSDP averages
  gradients over processes: the reduced gradient is the full-batch gradient of one process.
  Collectives must line up, so every process runs the same number of micro-batches; one that
  has run out of rows runs a padding micro-batch with weight 0.
- The warm start (SFT) runs the same batches in every process: their average is the
  single-process gradient.
"""

from __future__ import annotations

import copy
import dataclasses
import itertools
import os
import sys
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch
import torch.distributed as dist
from torch import nn

from agentic_rl.config.parse import ConfigError
from agentic_rl.config.train import LearnerConfig
from agentic_rl.learner.batch import TrainBatch
from agentic_rl.types import Completion, ImageRef, SamplingParams, Trajectory

if TYPE_CHECKING:
    from agentic_rl.train.setup import Setup

# Rollout seeds are offset by rank times this, so processes do not draw the same random numbers.
_RANK_SEED_STRIDE = 1_000_003


class CausalLMRoot(nn.Module):
    """The FSDP2 root unit around a Hugging Face causal LM.

    `token_logprobs` (model/load.py) runs the model's backbone and then projects the hidden states
    with the output-embedding weight itself. FSDP2 gathers a unit's weights only inside that
    unit's forward, so the root's forward *is* the backbone: `base_model_prefix` points back at
    the root, and after its forward the head weight is the gathered tensor (FSDP2 keeps the
    root gathered until backward). The wrapped model is `.lm`; parameter names gain "lm.".
    """

    base_model_prefix = "backbone"

    def __init__(self, lm: nn.Module) -> None:
        super().__init__()
        self.lm = lm

    @property
    def backbone(self) -> nn.Module:
        return self

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> Any:
        backbone = getattr(self.lm, self.lm.base_model_prefix)
        return backbone(input_ids=input_ids, attention_mask=attention_mask)

    def get_output_embeddings(self) -> nn.Module:
        return self.lm.get_output_embeddings()


def decoder_layers(lm: nn.Module) -> list[nn.Module]:
    """The transformer blocks of a Hugging Face causal LM (each becomes one FSDP unit); [] when
    the layout is unknown (the whole model is then one unit: correct, but less memory-frugal)."""
    backbone = getattr(lm, lm.base_model_prefix, lm)
    for name in ("layers", "h", "blocks"):
        layers = getattr(backbone, name, None)
        if isinstance(layers, nn.ModuleList):
            return list(layers)
    return []


def init_process_group(device: torch.device | None = None) -> tuple[int, int, torch.device]:
    """Join the torchrun process group (rank, world size, this process's device): NCCL on
    `device` when it is a GPU (trainer.device, resolved: cuda:LOCAL_RANK), else gloo. Without
    `device`: this process's GPU when there is one."""
    if "RANK" not in os.environ or "WORLD_SIZE" not in os.environ:
        raise ConfigError(
            "learner.strategy=fsdp2 runs one process per device under torchrun, e.g. "
            "`torchrun --nproc_per_node=2 -m agentic_rl.cli train RECIPE learner.strategy=fsdp2`"
        )
    if device is None:
        device = torch.device("cpu")
        if torch.cuda.is_available():
            device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return dist.get_rank(), dist.get_world_size(), device


def shutdown() -> None:
    """Leave the process group, if one was joined (every process reaches this together)."""
    if dist.is_available() and dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


class DataParallel:
    """This process's place in an FSDP2 run and the collectives the trainer needs."""

    def __init__(self, cfg: LearnerConfig, rank: int, world_size: int, device: torch.device):
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import MixedPrecisionPolicy

        self.cfg, self.rank, self.world_size, self.device = cfg, rank, world_size, device
        self.mesh = init_device_mesh(device.type, (world_size,))
        self.mixed_precision = (
            MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
            if cfg.mixed_precision == "bf16"
            else MixedPrecisionPolicy()
        )
        self.trained: list[nn.Module] = []  # FSDP roots whose gradients are reduced
        self.full_policy: nn.Module | None = None  # the generator's full copy (shard_setup)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    # -- sharding -----------------------------------------------------------------------------

    def broadcast_(self, module: nn.Module) -> None:
        """Make every process hold rank 0's weights (a model built from an unseeded random
        init would otherwise differ, and each process would shard a different model). The
        module stays where it is; NCCL sends through a copy on this process's GPU."""
        for tensor in itertools.chain(module.parameters(), module.buffers()):
            staged = tensor.data.to(self.device)
            dist.broadcast(staged, src=0)
            if staged is not tensor.data:
                tensor.data.copy_(staged)

    def shard_lm(self, lm: nn.Module) -> CausalLMRoot:
        """Shard a causal LM in place: one FSDP unit per decoder layer plus the root."""
        from torch.distributed.fsdp import fully_shard

        lm.to(self.device)
        for layer in decoder_layers(lm):
            fully_shard(layer, mesh=self.mesh, mp_policy=self.mixed_precision)
        root = CausalLMRoot(lm)
        root.train(lm.training)
        fully_shard(root, mesh=self.mesh, mp_policy=self.mixed_precision)
        if any(p.requires_grad for p in root.parameters()):
            self.trained.append(root)
        return root

    def shard_module(self, module: nn.Module) -> nn.Module:
        """Shard a trained module that is not the policy: the value head as one unit; a separate
        critic (model/critic.py, which names its trunk through `base_model_prefix` like a
        causal LM) one unit per decoder layer plus its root (embeddings, norm, value head)."""
        from torch.distributed.fsdp import fully_shard

        module.to(self.device)
        if hasattr(module, "base_model_prefix"):
            for layer in decoder_layers(module):
                fully_shard(layer, mesh=self.mesh, mp_policy=self.mixed_precision)
        fully_shard(module, mesh=self.mesh, mp_policy=self.mixed_precision)
        self.trained.append(module)
        return module

    def full_state_dict(
        self, root: CausalLMRoot, device: torch.device | None = None
    ) -> dict[str, torch.Tensor]:
        """The full weights of a sharded LM under its own (Hugging Face) names, each moved to
        `device` as soon as it is gathered. A collective: every process gathers the same tensors
        in the same order."""
        from torch.distributed.tensor import DTensor

        root.reshard()  # a gathered root may hold compute-dtype copies (mixed precision)
        gathered: dict[int, torch.Tensor] = {}  # tied weights are gathered once
        out = {}
        for name, tensor in root.lm.state_dict().items():
            if isinstance(tensor, DTensor):
                if id(tensor) not in gathered:
                    gathered[id(tensor)] = tensor.full_tensor().to(device or self.device)
                tensor = gathered[id(tensor)]
            out[name] = tensor.to(device or self.device)
        return out

    # -- rollouts -----------------------------------------------------------------------------

    def my_share(self, groups: Sequence[str]) -> list[int]:
        """The indices of the episodes this process plays: whole groups, split evenly over the
        processes in order of first appearance (so a group's samples stay in one process)."""
        order = list(dict.fromkeys(groups))
        owner = {g: i * self.world_size // max(len(order), 1) for i, g in enumerate(order)}
        return [i for i, g in enumerate(groups) if owner[g] == self.rank]

    def gather_episodes(
        self, mine: list[int], played: list[list[Trajectory]], total: int
    ) -> list[list[Trajectory]]:
        """Every process's episodes in the original order (the same list in every process),
        from each process's `played` episodes at indices `mine` (a collective)."""
        parts: list[Any] = [None] * self.world_size
        dist.all_gather_object(parts, list(zip(mine, played, strict=True)))
        episodes: list[Any] = [None] * total
        for index, samples in itertools.chain.from_iterable(parts):
            episodes[index] = samples
        return episodes

    # -- the update ---------------------------------------------------------------------------

    def micro_batches(
        self, batch: TrainBatch, rows: torch.Tensor, size: int
    ) -> Iterator[tuple[TrainBatch, float]]:
        """This process's micro-batches of `rows` (every world_size-th of the length-sorted
        rows, so lengths balance) and their loss weights; see the module docstring."""
        mine = rows[self.rank :: self.world_size]
        busiest = -(-len(rows) // self.world_size)
        count = -(-busiest // size)
        for i in range(count):
            index, weight = mine[i * size : (i + 1) * size], float(self.world_size)
            if len(index) == 0:  # out of rows: keep the collectives in step, add nothing
                index, weight = rows[:1], 0.0
            self._sync_gradients(i == count - 1 or not self.cfg.defer_grad_sync)
            yield self.to_device(batch.select(index)), weight

    def _sync_gradients(self, enabled: bool) -> None:
        for module in self.trained:
            module.set_requires_gradient_sync(enabled)

    def forward_no_grad(
        self,
        forward: Callable[..., tuple[torch.Tensor, torch.Tensor | None]],
        model: nn.Module,
        batch: TrainBatch,
        chunk: int,
        micro: int,
        value_head: nn.Module | None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """`forward` (learner.forward_no_grad) on this process's contiguous share of the rows,
        padded with copies of row 0 so every process runs as many forwards; the results of all
        processes are gathered into [N, T] tensors on the CPU."""
        n = len(batch)
        share = -(-n // self.world_size)
        start = min(self.rank * share, n)
        index = torch.arange(start, min(start + share, n))
        index = torch.cat([index, index.new_zeros(share - len(index))])
        local = self.to_device(batch.select(index))
        logprobs, values = forward(model, local, chunk, micro, value_head)
        for module in (model, value_head):
            if module is not None and hasattr(module, "reshard"):
                module.reshard()  # the root stays gathered after a forward; free it
        gathered_values = self._gather_rows(values, n) if values is not None else None
        return self._gather_rows(logprobs, n), gathered_values

    def _gather_rows(self, local: torch.Tensor, n: int) -> torch.Tensor:
        parts = [torch.empty_like(local) for _ in range(self.world_size)]
        dist.all_gather(parts, local.contiguous())
        return torch.cat(parts)[:n].cpu()

    def sum_over_processes(self, sums: Mapping[str, float]) -> dict[str, float]:
        totals = torch.tensor(list(sums.values()), dtype=torch.float64, device=self.device)
        dist.all_reduce(totals)
        return dict(zip(sums, totals.tolist(), strict=True))

    def max_over_processes(self, value: float) -> float:
        """The largest of every process's `value` (a collective)."""
        box = torch.tensor([value], dtype=torch.float64, device=self.device)
        dist.all_reduce(box, op=dist.ReduceOp.MAX)
        return float(box)

    def to_device(self, batch: TrainBatch) -> TrainBatch:
        if self.device.type == "cpu":
            return batch
        moved = {
            k: v.to(self.device) if isinstance(v, torch.Tensor) else v
            for k, v in vars(batch).items()
        }
        return TrainBatch(**moved)

    # -- checkpoints (checkpoint/sharded.py), same signatures as checkpoint/io.py ---------------------

    def save_checkpoint(self, out_dir: Path, step: int, *args: Any, **kwargs: Any) -> Path:
        from agentic_rl.checkpoint.sharded import save_sharded_checkpoint

        return save_sharded_checkpoint(self, out_dir, step, *args, **kwargs)

    def load_checkpoint(self, path: Path, *args: Any, **kwargs: Any) -> dict[str, Any]:
        from agentic_rl.checkpoint.sharded import load_sharded_checkpoint

        return load_sharded_checkpoint(self, path, *args, **kwargs)

    def barrier(self) -> None:
        dist.barrier()

    def broadcast_object(self, obj: Any) -> Any:
        """Rank 0's `obj`, in every process."""
        box = [obj]
        dist.broadcast_object_list(box, src=0)
        return box[0]


class ShardedGenerator:
    """The generator of one process: `inner` (e.g. HFGenerator) runs on the full copy of the
    policy; `update_weights` refreshes that copy from the shards of `policy`."""

    def __init__(self, inner: Any, policy: CausalLMRoot, dp: DataParallel) -> None:
        self.inner, self.policy, self.dp = inner, policy, dp

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        params: SamplingParams | Sequence[SamplingParams],
        images: Sequence[Sequence[ImageRef]] | None = None,
    ) -> list[Completion]:
        if isinstance(params, SamplingParams):
            params = [params] * len(prompts)
        offset = self.dp.rank * _RANK_SEED_STRIDE
        params = [
            dataclasses.replace(p, seed=p.seed + offset) if p.seed is not None else p
            for p in params
        ]
        if images is None:  # text-only calls keep the plain signature, as the rollout makes them
            return self.inner.generate(prompts, params)
        return self.inner.generate(prompts, params, images=images)

    def update_weights(self, state: Mapping[str, torch.Tensor] | None = None) -> None:
        """Gather the sharded policy into the full copy (a collective: the trainer calls it in
        every process after each update). `state` is not needed: the shards are read from the
        policy itself."""
        target = self.inner.model.state_dict()
        device = next(iter(target.values())).device
        full = self.dp.full_state_dict(self.policy, device)
        if set(full) != set(target):  # load_state_dict(strict=False) below would ignore these
            raise RuntimeError(f"weight sync names differ: {sorted(set(full) ^ set(target))[:5]}")
        self.inner.update_weights(full)

    def __getattr__(self, name: str) -> Any:  # counters, sleep/wake and the like
        if name in ("inner", "policy", "dp"):  # not set yet (copy, pickle)
            raise AttributeError(name)
        return getattr(self.inner, name)


def shard_setup(setup: Setup) -> DataParallel:
    """Join the torchrun group and shard the run's models in place (`setup.policy`,
    `.reference`, `.value_head`); the generator keeps the full policy as its own copy, on this
    process's device (`setup.device`, where `build` put it: its GPU under NCCL)."""
    rank, world_size, device = init_process_group(setup.device)
    dp = DataParallel(setup.cfg.learner, rank, world_size, device)
    if not dp.is_main:  # every process computes the same metrics: print them once
        sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (for the life of the process)
    full = setup.policy  # the object the generator runs on
    dp.broadcast_(full)
    dp.full_policy = full
    setup.policy = dp.shard_lm(copy.deepcopy(full))
    if setup.reference is not None:
        dp.broadcast_(setup.reference)
        setup.reference = dp.shard_lm(setup.reference)
    if setup.value_head is not None:
        dp.broadcast_(setup.value_head)
        setup.value_head = dp.shard_module(setup.value_head)
    setup.generator = ShardedGenerator(setup.generator, setup.policy, dp)
    setup.dp = dp
    return dp
