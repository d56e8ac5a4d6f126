"""Config sections of the training side: the optimizer (`optim`), the supervised warm start
(`warm_start`), preference training (`dpo`), the learner engine (`learner`) and the run itself
(`trainer`)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class OptimConfig:
    lr: float = 5e-6
    """AdamW learning rate for RL."""
    weight_decay: float = 0.0
    """AdamW weight decay."""
    beta1: float = 0.9
    """AdamW beta1."""
    beta2: float = 0.999
    """AdamW beta2."""
    warmup_steps: int = 0
    """Linear learning-rate warmup steps."""
    max_grad_norm: float = 1.0
    """Gradient clipping by global norm; 0 disables it."""
    micro_batch_size: int = 8
    """Sequences per forward/backward (RL update and warm start); gradients accumulate over
    the batch."""


@dataclass
class WarmStartConfig:
    num_tasks: int = 0
    """Scripted-expert episodes for a supervised warm start before RL; 0 disables it."""
    epochs: int = 1
    """Passes over the expert episodes."""
    lr: float = 1e-4
    """Learning rate of the warm start."""
    batch_size: int = 8
    """Episodes per warm-start optimiser step (run in micro-batches of optim.micro_batch_size)."""


@dataclass
class LearnerConfig:
    """Where the policy update runs: in this process, or sharded over processes with FSDP2."""

    strategy: str = "single"
    """"single": this process holds the whole model. "fsdp2": one process per device under
    torchrun (`torchrun --nproc_per_node=N -m agentic_rl.cli train RECIPE learner.strategy=fsdp2`)
    on gloo (CPU) or NCCL (GPU); the policy, reference and value head are sharded with torch
    FSDP2, each process plays its share of every rollout batch on a full copy of the weights
    (synced after each update) and trains on its share of the batch; sharded checkpoints
    (torch.distributed.checkpoint) resume only with the same number of processes.
    Gradient accumulation: each process runs its rows in micro-batches of
    optim.micro_batch_size sequences and steps once per batch, as in one process."""
    mixed_precision: str = "no"
    """"bf16": forward and backward passes compute in bfloat16 over float32 master weights,
    gradients and optimizer state (needs model.dtype=float32): torch.autocast in one process
    (CPU or GPU; 2.8x faster forward+backward on a CPU with AVX512-BF16, measured), FSDP2's
    mixed precision with float32 gradient reduction under fsdp2 (GPU only). "no": model.dtype."""
    defer_grad_sync: bool = False
    """fsdp2: reduce gradients across processes once, after the last micro-batch, instead of
    after every micro-batch: less communication, but each process holds full-size gradients
    until the optimiser step."""


@dataclass
class DPOConfig:
    """`agentic-rl dpo`: preference training on trajectory pairs (Rafailov et al. 2023)."""

    beta: float = 0.1
    """Strength of the implicit KL to the reference: loss = -log sigmoid(beta * margin)."""
    lr: float = 1e-6
    """AdamW learning rate."""
    epochs: int = 1
    """Passes over the pairs."""
    batch_size: int = 4
    """Pairs per optimiser step."""


@dataclass
class TrainerConfig:
    steps: int = 40
    """RL steps (one rollout batch and one update each)."""
    seed: int = 0
    """Seed of sampling and task order; same seed and config give the same numbers on CPU."""
    device: str = "auto"
    """Where the learner runs: the policy, the reference, the critic, the optimizer state and
    each micro-batch's forward and backward, and the HF generator, which samples with the
    policy itself. "auto": the GPU when torch sees one (under fsdp2: this process's,
    cuda:LOCAL_RANK), else the CPU; "cpu"; "cuda" or "cuda:N" (a load-time error without
    CUDA). With rollout.backend=vllm the engine shares that GPU (vllm.sleep_level frees its
    memory during updates)."""
    eval_every: int = 0
    """Evaluate on the held-out tasks every k steps (0: only before and after training)."""
    eval_before: bool = True
    """Evaluate the untrained (and the warm-started) model before RL."""
    save_every: int = 10
    """Checkpoint every k steps (and at the end)."""
    keep_last: int = 2
    """Checkpoints kept on disk."""
    out_dir: str = "runs"
    """Runs go to OUT_DIR/RUN_NAME."""
    run_name: str = ""
    """Run directory name; default: the recipe name."""
    resume: bool = True
    """Continue from the run directory's last checkpoint if there is one."""
    max_minutes: float = 0.0
    """Wall-clock budget for the RL steps (0: none); training stops early, saves and evaluates."""
    tensorboard: bool = True
    """Write TensorBoard event files under the run directory."""
    progress: bool = True
    """Show a progress bar (on a terminal) or one line per step."""
    export_model: bool = False
    """At the end, also write the policy as a Hugging Face model dir (RUN_DIR/model),
    loadable with model.name=DIR; multi-stage recipes set it to chain their stages."""
    log_trajectories: int = 64
    """Episodes per step (and per evaluation) written token by token to
    RUN_DIR/trajectories.jsonl.gz for `agentic-rl report`: whole groups picked at random (seeded),
    all of them when a step has no more than this; -1: all, 0: none."""
    wandb: bool = False
    """Also log the metrics to Weights & Biases (`pip install agentic-rl[wandb]`), under the
    same names as TensorBoard, in offline mode (RUN_DIR/wandb; `wandb sync` uploads it) unless
    the WANDB_MODE environment variable says otherwise."""
    wandb_project: str = "agentic-rl"
    """The Weights & Biases project (trainer.wandb=true)."""
