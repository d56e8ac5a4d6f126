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
    micro_batch_tokens: int = 0
    """Most tokens per forward/backward besides micro_batch_size's rows (RL update, no-grad
    logprob and value passes, warm start / SFT), counted as the pass runs them: a group's
    shared prompt once when packed (model.share_prefix), else every row padded to the longest;
    a longer row runs alone. Bounds activation memory on long prompts (veRL's
    ppo_max_token_len_per_gpu). The gradient does not depend on it. 0 = rows only. One process
    only (learner.strategy=single); the DPO stage batches by dpo.batch_size."""


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
    recovery_fraction: float = 0.0
    """Share of the expert episodes that show the env's scripted mistake (`expert_mistake`,
    e.g. a misspelt first search) where the env offers one, then the expert's recovery. The
    mistake is shown but not trained (loss mask 0), so the model learns to recover in the
    context a mistake leaves without learning to make it. Needs an env with `expert_mistake`."""


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
    failure_tasks: int = 0
    """UI-TARS-style learning from failures before RL (train/failures.py): the policy plays
    this many training tasks, each failed episode gives a pair at its first failing step (the
    scripted expert's action preferred over the agent's, same token prefix), and the policy is
    trained with DPO (beta, lr, epochs, batch_size above) on them. Needs an env with a scripted
    expert; 0 disables it."""
    recovery_pairs: bool = True
    """With failure_tasks: also a pair at the step after the error, as UI-TARS trains it: the
    agent's erroneous action is executed, and where the agent's next action differs from the
    scripted expert's recovery at that state, the recovery is preferred (the error sits in the
    shared prefix, never trained)."""


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
    eval_untrained: bool = True
    """With eval_before: evaluate the model as loaded, before any stage trains it (false: only
    the evaluations after the warm start and the other stages before RL). The greedy evaluation
    of the loaded model on the same held-out tasks does not depend on trainer.seed where the
    seed initialises no part of the policy (a new vision projector or value head is not
    evaluated greedily either way; a LoRA adapter starts as the identity), so a multi-seed study
    can measure it on one seed and skip it on the others."""
    save_every: int = 10
    """Checkpoint every k steps (and at the end)."""
    keep_last: int = 2
    """Checkpoints kept on disk."""
    out_dir: str = "runs"
    """Runs go to OUT_DIR/RUN_NAME."""
    run_name: str = ""
    """Run directory name; default: the recipe name."""
    resume: bool | str = True
    """Continue from the run directory's last checkpoint if there is one. A run whose settings
    differ from the checkpointed run's (beyond length, logging and saving: config/checks.py
    RESUMABLE_KEYS) is refused, naming the settings; "force" resumes anyway (`train --force`);
    false never resumes."""
    max_minutes: float = 0.0
    """Wall-clock budget for the RL steps (0: none); training stops early, saves and evaluates."""
    tensorboard: bool = True
    """Write TensorBoard event files under the run directory."""
    progress: bool = True
    """Show a progress bar (on a terminal) or one line per step."""
    export_model: bool = False
    """At the end, also write the policy as a Hugging Face model dir (RUN_DIR/model),
    loadable with model.name=DIR; multi-stage recipes set it to chain their stages. With a
    policy per role (model.role_policies), a model dir per role, RUN_DIR/model/roles/<role>,
    and RUN_DIR/model/roles.json naming them."""
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
    save_batches: bool = False
    """Save every step's training data as a replay bundle in RUN_DIR/batches/step_N (token ids,
    masks, behaviour logprobs, rewards before and after shaping, groups, step rewards, the
    resolved config, the code version; train/bundles.py): `agentic-rl replay RUN_DIR/batches/
    step_N` reruns the step's reward shaping, batch filters, advantages and update and compares
    them with the logged metrics. Replaying step N needs the weights it started from, the
    checkpoint of step N - 1: set trainer.save_every=1 and trainer.keep_last=0 to replay any
    step. With it, every checkpoint keeps its optimizer state (otherwise only the latest does),
    which updates of several optimizer steps (algo.ppo_mini_batches, algo.epochs) need."""


@dataclass
class PlannerConfig:
    """Inference-time planning (`agentic-rl eval RECIPE --planner mcts|cot`; rollout/rap.py):
    RAP's MCTS with the policy model as world model and evaluator, or greedy chain of thought,
    on an env that can be simulated in text."""

    iterations: int = 10
    """MCTS iterations per problem (RAP Blocksworld: 10, also 20)."""
    depth_limit: int = 0
    """Deepest plan searched; 0: the task's `plan_length` field (RAP: the problem's plan
    length)."""
    w_exp: float = 1.0
    """UCT exploration weight."""
    cum_reward: str = "mean"
    """A path's future rewards -> one return: "mean" (RAP) or "sum" (llm-reasoners default)."""
    calc_q: str = "mean"
    """A node's returns over its visits -> Q: "mean" or "max"."""
    alpha: float = 0.5
    """Weight of the model's rewards (action likelihood, self-evaluation, state confidence);
    1 - alpha weighs closeness to the goal."""
    goal_reward: float = 100.0
    """The goal term when the predicted state satisfies the goal."""
    world_model: str = "llm"
    """"llm": the model predicts the next state (RAP); "exact": the env's own simulator."""
    max_state_tokens: int = 80
    """Token budget of one world-model prediction."""
    cot_max_tokens: int = 96
    """Token budget of the chain-of-thought plan."""


@dataclass
class KnownSelfConfig:
    """KnownSelf (train/knownself.py): label each expert step fast / slow / knowledgeable by where
    the model fails, SFT on the labelled trajectories, then DPO (+ NLL) on pairs."""

    enabled: bool = False
    """Train the recipe as KnownSelf (label -> SFT -> DPO) instead of RL."""
    phase: str = "all"
    """"all": label, SFT, pairs, DPO in one run; "sft_only": only the SFT-only baseline (its
    weights are then reset, so a next stage starts from the same model); "sft": label and SFT
    (saves RUN_DIR/labelled.jsonl); "dpo": pairs and DPO from the labelled trajectories of
    `labelled_file` (the recipe chains these phases as stages with `stages:`)."""
    labelled_file: str = ""
    """phase "dpo": the labelled trajectories (JSONL); "" = labelled.jsonl beside the model
    the stage starts from (the previous stage's run directory)."""
    num_tasks: int = 64
    """Training tasks whose expert trajectories are labelled."""
    reflect_tokens: int = 48
    """Token budget of the model's reflection when its first action was wrong."""
    action_tokens: int = 32
    """Token budget of the model's proposed action at each gold step while labelling."""
    pair_tasks: int = 32
    """Training tasks the SFT model plays to build DPO pairs (failed episode vs labelled gold):
    the labelled tasks held back from SFT (`sft_tasks`) first, then the SFT ones."""
    sft_tasks: int = 0
    """How many of the labelled trajectories the SFT stage trains on (0 = all, as KnownSelf
    does). The rest are held back for the DPO stage: a small model memorises its few SFT tasks,
    so replaying them gives no failures and no pairs; held-back tasks it has not seen do."""
    nll_coef: float = 1.0
    """Weight of the NLL on the chosen trajectory added to the DPO loss (KnownSelf)."""
    sft_only_baseline: bool = False
    """Also measure the SFT-only baseline in the same run: the starting model fine-tuned with
    the same settings on the plain expert trajectories of the same tasks (no labels), then
    evaluated; the weights are restored before KnownSelf starts."""
