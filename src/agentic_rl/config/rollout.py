"""Config sections of the generation side: the policy model (`model`), the environment (`env`),
how rollouts are sampled (`rollout`), the vLLM generator engine (`vllm`) and the Ray env /
generator workers (`ray`). One dataclass per YAML section, a docstring per field;
`agentic_rl.config.schema` assembles them into `Config`."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

ROLE_POLICIES = ("shared", "adapters", "models")  # model.role_policies


@dataclass
class ModelConfig:
    name: str = "smollm2-135m"
    """"smollm2-135m" (the bundled SmolLM2-135M-Instruct), "tiny" (a randomly initialised
    2-layer model with the bundled tokenizer, for tests), or a local Hugging Face model dir."""
    dtype: str = "float32"
    """float32 or bfloat16. On the 2-core CPU fp32 was measured faster than bf16."""
    logprob_chunk_size: int = 64
    """Sequence positions per chunk when computing token logprobs; the [B, T, vocab] logits
    tensor is never materialised for the whole batch."""
    share_prefix: bool = True
    """Learner passes run each micro-batch as one packed row: the prompt a group's rows share
    once, every answer without padding (model/packing.py), or, where cheaper, the shared prompt once
    with its KV reused for every row (model/prefix_sharing.py): same numbers, the prompt's cost paid
    once instead of G times. Micro-batches are formed group by group. Passes that feed a value
    head need every position's state: packed rows only (no two-pass form). Off under
    learner.strategy=fsdp2."""
    fast_cpu_attention: bool = True
    """bfloat16 attention on CPU over at most 256 x 256 positions runs as two matmuls instead
    of PyTorch's fused SDPA kernel, which is slow in bfloat16 on CPU (model/attention.py); same
    results up to bfloat16 rounding. Affects only bf16 compute on CPU (mixed_precision=bf16
    or model.dtype=bfloat16); float32, GPUs and longer attention use SDPA as before. The
    generator's bf16 copy (model size >= 20M parameters) switches to SDPA where a one-time
    measurement of a decoding step finds SDPA clearly faster on this machine
    (HFGenerator.fast_paths)."""
    cache_dir: str = ""
    """Where the dequantised bundled model is cached; default ~/.cache/agentic_rl."""
    gradient_checkpointing: bool = False
    """Recompute each decoder layer's activations in the backward pass instead of storing them:
    activation memory drops from all layers to about one layer per micro-batch, for roughly a
    third more compute in the update (see bench/train_memory.py)."""
    lora_rank: int = 0
    """LoRA rank r (PEFT, extra `agentic-rl[peft]`); 0 = full fine-tuning. With r > 0 only the
    adapters train, the KL reference is the base model with the adapter switched off (no second
    copy), and checkpoints and weight syncs to the generator carry the adapter only."""
    lora_alpha: float = 16.0
    """LoRA scale numerator: the adapted layer computes W x + (lora_alpha / lora_rank) B A x."""
    lora_targets: list[str] = field(
        default_factory=lambda: [
            "q_proj",
            "k_proj",
            "v_proj",
            "o_proj",
            "gate_proj",
            "up_proj",
            "down_proj",
        ]
    )
    """Names of the linear layers that get adapters (matched as name suffixes); the default is
    every attention and MLP projection of Llama/Qwen/SmolLM-style models."""
    role_policies: str = "shared"
    """Multi-agent envs (an env with `roles`, rollout.mode=memory): what a role's policy is
    (`ROLE_POLICIES`; model/roles.py).
    "shared": every role is the one model, told apart by its role prompt (MATPO); a frozen role
    (rollout.train_roles) still moves with the weights the trained roles update.
    "adapters": each role its own LoRA adapter on the one frozen base (model.lora_rank > 0):
    adapter-sized extra memory per role.
    "models": each role its own full copy of the model (the same initial weights, loaded once):
    n roles hold n times the parameters, gradients and optimizer state (and n reference copies
    with algo.kl_coef > 0); each role decodes with its own HF generator and KV cache. With
    model.name an exported team (DIR/roles.json, from trainer.export_model or `agentic-rl
    export` of such a run) each role starts from its own exported model instead.
    With "adapters" or "models" the generator decodes a role's conversations with that role's
    policy and the learner scores and updates each sample through its role's policy only, so
    one role's update never moves another's, and a frozen role's policy never moves.
    Checkpoints hold every role's policy."""


@dataclass
class EnvConfig:
    name: str = "search_qa"
    """Environment: "search_qa", "multihop_qa" (two-hop search), "zerosearch_qa" (two-hop, an
    LLM-simulated search engine), "web_qa" (two-hop, web search + browsing), "calculator",
    "math_tool" (python sandbox), "math_text" (no tools), "math_multitool" (python +
    calculator, ARTIST's reward), "code_repair", "code_self_play" (Absolute Zero's propose /
    solve code tasks), "gridworld" (multi-step, GiGPO), or any env added to the registry
    (envs/registry.py: `register_env`, or an installed package's `agentic_rl.envs` entry
    point)."""
    num_train_tasks: int = 2000
    """Training tasks generated from `seed` (sampled with replacement per step); with
    env.train_file, the most rows read from it."""
    num_eval_tasks: int = 100
    """Held-out tasks (disjoint from training) evaluated greedily before and after training."""
    seed: int = 0
    """Seed of the task generators (and of the search corpus)."""
    topk: int = 3
    """Documents returned per search (envs with a search tool)."""
    format_penalty: float = 0.1
    """Reward subtracted for a malformed action or a turn without any action."""
    tool_timeout_s: float = 10.0
    """A tool call running longer than this returns an error observation."""
    options: dict[str, Any] = field(default_factory=dict)
    """Env-specific settings: each key goes to the env constructor and/or the task generator
    parameter of that name (e.g. {reward: f1, num_entities: 400}); unknown keys fail at load."""
    train_file: str = ""
    """Your own training tasks instead of the generated ones: a .jsonl, .json (a list of rows)
    or .parquet file in Search-R1 / veRL layout (`question` or a veRL `prompt`, and
    `golden_answers` or `reward_model.ground_truth`; envs/task_files.py). The first
    env.num_train_tasks rows are used. Needs env.eval_file. "" = generated tasks."""
    eval_file: str = ""
    """Your own held-out tasks (same formats as env.train_file; the first env.num_eval_tasks
    rows), evaluated instead of the generated ones. "" = generated tasks."""
    reward_fn: str = ""
    """Your own TRL-shaped reward function, "package.module:function" (importable) or
    "path/to/file.py:function": `fn(completions, **task_fields) -> list[float]`, checked at
    load and called once per batch of finished
    episodes with `completions` (each episode's text after the prompt: model turns and
    observations), `prompts`, `answers` (gold answers per task), `task_id` and every key of the
    tasks' `fields` (a list each, None where a task lacks the key); rewards/custom.py.
    Episode mode only (not step mode, context_budget, self-play or TTRL). Metrics such as
    `success` still come from the env. "" = the env's reward only."""
    reward_mode: str = "replace"
    """How env.reward_fn combines with the env's reward: "replace" (the episode's reward is
    the function's value; the env's step rewards still land on their turns, the rest of the
    episode reward on the last one) or "add" (the function's value is added to the env's
    reward)."""
    select_by_variance: int = 0
    """1-shot RLVR's choice of training example (Wang et al. 2025; train/task_select.py): before
    RL (after any warm start) the policy samples env.select_samples episodes of each of the first
    this-many training tasks (the candidates) at rollout.temperature, and RL trains on the
    env.num_train_tasks candidates whose episode rewards vary most (population variance,
    p(1-p) for a 0/1 reward; ties: the lowest index). A task the policy always or never solves
    gives GRPO zero advantages. The paper ranks by the variance of each example's training
    accuracy over a whole RL run on the full dataset; this uses the current policy's samples
    instead, which costs candidates x samples episodes once. The choice is logged
    (task_select/* metrics, summary.json "task_selection") and kept in the checkpoint, so a
    resumed run trains on the same tasks; a run of trainer.steps=0 (nothing to choose for)
    skips it. Must exceed env.num_train_tasks; 0 = off."""
    select_samples: int = 8
    """Episodes sampled per candidate by env.select_by_variance (at least 2)."""


@dataclass
class TreeConfig:
    """rollout.tree: tree-shaped rollouts (rollout/tree.py), branched where `branch` says.

    branch=random, Tree-GRPO's agent-step trees (Ji et al. 2025, arXiv 2509.21240): per task,
    `roots` independent episodes are played; then `iterations` times, `expansions` nodes of each
    tree (turn boundaries after an observation) are chosen at random and each is continued to
    the end as a new leaf that shares its parent's prefix. Each tree ends with 1 + iterations x
    expansions leaves, and rollout.group_size must equal the task's leaves, roots x (1 +
    iterations x expansions). The reference scripts' default is roots=2, expansions=2,
    iterations=1.

    branch=entropy, ARPO's entropy-triggered branching (Dong et al. 2025, arXiv 2507.19849):
    per task, `roots` (ARPO's initial_rollouts N) full episodes start; after each tool result
    a branch point gets up to beam_size - 1 new leaves where the policy's entropy at the next
    turn rose over the episode's first turn, until the task has rollout.group_size (M) leaves;
    a task whose episodes all ended short of M gets fresh episodes, one at a time (as ARPO's
    code). ARPO's 7B script: group_size=16, roots=8, beam_size=2, branch_threshold=0.5,
    entropy_weight=0.2.

    Episode mode only; the env must be branchable (envs/base.py)."""

    roots: int = 0
    """Trees per task (independent root episodes): Tree-GRPO's M, ARPO's initial rollouts N;
    0 = no tree rollout."""
    expansions: int = 2
    """branch=random, N: nodes of each tree expanded per iteration."""
    iterations: int = 1
    """branch=random, L: expansion rounds; a later round may branch from an earlier round's
    leaves."""
    train_leaves: int = 0
    """branch=random, K: leaves of each tree that train, drawn uniformly without replacement
    once the trees are played (Tree-GRPO's leaf subsampling, the reference's ts_k: its scripts
    play 1 + 1 x 2 = 3 leaves a tree and train all of them); the others still count in the
    step's rollout metrics. Each task then trains roots x K leaves, its group for every
    estimator; a tree left with fewer (leaves lost to infrastructure failures) trains all it
    has. 0 = every leaf; otherwise 1 <= K < 1 + iterations x expansions, and K >= 2 for the
    tree_grpo estimators (their intra-tree term compares a tree's leaves)."""
    branch: str = "random"
    """Where trees branch: "random" (Tree-GRPO: `expansions` random nodes per round) or
    "entropy" (ARPO: after a tool result, where the entropy of the next turn's first
    `entropy_tokens` tokens rose over the episode's first turn; needs a generator that reports
    entropies, the HF backend)."""
    entropy_tokens: int = 20
    """branch=entropy, k: a turn's entropy is the sum over its first k sampled tokens of each
    token's entropy (of the distribution it was drawn from), divided by log |V| (ARPO's code)."""
    entropy_weight: float = 0.2
    """branch=entropy, w in ARPO's rule p = clamp(u - w x dH, 0, 1), u ~ U(0, 1): a larger w
    makes an entropy rise dH branch more often (ARPO's scripts 0.2; its code's default 0.5).
    0 = branch at the rate branch_threshold whatever the entropy."""
    branch_threshold: float = 0.5
    """branch=entropy, tau: a copy is made where p <= tau (ARPO's branch_probability)."""
    beam_size: int = 2
    """branch=entropy: a branch point gets up to beam_size - 1 new leaves (each its own draw
    of u), within the task's budget of rollout.group_size leaves."""


@dataclass
class RolloutConfig:
    tasks_per_step: int = 2
    """B: tasks per training step."""
    group_size: int = 8
    """G: samples per task (the GRPO group)."""
    max_turns: int = 4
    """Model turns per episode; the episode is truncated after the last one."""
    max_tokens_per_turn: int = 64
    """New tokens per model turn."""
    max_total_tokens: int = 512
    """Budget of tokens after the prompt (model turns and observations together). An episode
    generates at most min(max_total_tokens, max_turns x max_tokens_per_turn) tokens
    (`max_generated_tokens`), the length DAPO's overlong penalty counts to."""
    temperature: float = 1.0
    """Sampling temperature for training rollouts (evaluation is greedy)."""
    top_p: float = 1.0
    """Nucleus sampling threshold."""
    chat_format: str = "tags"
    """Action format: "tags" (Search-R1 style <search>q</search>, results inline) or "hermes"
    (<tool_call>{json}</tool_call>, results in a tool turn)."""
    eval_batch_size: int = 50
    """Episodes decoded together during evaluation."""
    scheme: str = "sample"
    """How a training step gathers its episodes: "sample" (rollout.tasks_per_step training tasks
    x rollout.group_size samples, through the batch filters) or "self_play" (Absolute Zero:
    the policy proposes tasks, the env validates them, the policy solves them; needs an env
    with a self-play protocol: env.name=code_self_play)."""
    mode: str = "episode"
    """"episode": one training sample per episode, the context grows turn by turn. "step"
    (GiGPO, verl-agent): every env step is its own training sample whose context is the prompt
    plus the last `history_window` steps, so the context stays flat over long episodes; the
    step's sampled tokens are its only loss-mask-1 tokens. "memory" (MemAgent, env.name=memagent):
    every episode is several independent conversations (read a section into an overwritten
    memory, then answer from the memory), each its own training sample sharing the episode's
    advantage (rollout/memory.py); max_tokens_per_turn is the answer's budget."""
    train_roles: list[str] = field(default_factory=list)
    """Multi-agent conversation envs (rollout.mode=memory with an env that has `roles`, e.g.
    planner_executor): the roles whose samples train; the others act with the same policy but
    their tokens keep loss mask 0 (a frozen agent inside the system). Empty = every role trains.
    With one shared model a frozen role's behaviour still moves with the weights the trained
    roles update."""
    tree: TreeConfig = field(default_factory=TreeConfig)
    """Tree-shaped rollouts (episode mode): see TreeConfig."""
    history_window: int = 2
    """Step mode: past steps (model turn + observation) kept in each step's context."""
    context_budget: int = 0
    """Episode mode, long horizons (ASearcher): the most tokens any turn is generated from
    (prompt + kept history). Older observations are cut, then dropped, to fit; the episode is
    then trained as segments, each turn in the exact context it saw (rollout/budgeted.py).
    0 = off: the context is the whole history."""
    context_keep_turns: int = 2
    """With context_budget: the latest turns (model turn + observation) kept whole when fitting,
    as long as they fit the budget."""
    context_target: int = 0
    """With context_budget: a cut fits the history into this many tokens (0 = context_budget);
    lower values leave room for a few turns before the next cut (fewer, longer segments)."""
    backend: str = "hf"
    """Generator engine: "hf" (transformers in this process, shares the learner's weights; CPU
    or GPU) or "vllm" (a vLLM engine on the GPU, extra `agentic-rl[vllm]`, settings in the
    `vllm` section; it receives the new weights after every update)."""
    mixed_precision: str = "no"
    """backend hf: "bf16" generates under torch.autocast(bfloat16) over the float32 weights
    (1.7x faster decoding on a CPU with AVX512-BF16, measured; sampled-token logprobs differ
    from float32 by ~0.03 nats on average, see bench/README.md); "no" computes in model.dtype."""
    compiled_decode: str = "never"
    """backend hf, CPU: decoding steps through a torch.compile'd (inductor) decoder layer over a
    preallocated KV cache (backends/compiled.py) instead of the model's forward. Off by default
    until bench/compiled_decode.py measures it faster on the bundled model: every run would pay
    the compile (seconds per graph on a small CPU) for a gain not yet shown. "auto": on the
    first call the generator compiles it, checks it against the model's forward on a synthetic
    step and times both, keeping it only if clearly faster (models of 20M+ parameters; smaller
    ones keep the forward); "always": use it whenever it compiles and agrees; "never": today's
    path. Llama-style models only (others, LoRA adapters and GPUs keep the forward); where
    compiling fails (no C++ compiler) it says so once in the log and keeps the forward. Same
    tokens and logprobs up to float rounding; the choice and the compile time are in
    HFGenerator.compiled_decode."""
    train_on_observations: bool = False
    """Ablation only: put tool/retrieval observation tokens in the loss as if the policy had
    written them (Search-R1's "no retrieved-token masking" ablation). Off = the standard mask."""
    max_staleness: int = 0
    """Asynchronous rollouts (AReaL): 0 = synchronous (generate, then update, in turn). k > 0 =
    a rollout worker keeps generating while the learner updates, on samples from policy versions
    at most k updates old; stale tokens are corrected with decoupled PPO (algo.stale_is_cap)."""
    thinking_mode: str = "off"
    """Qwen3 thinking switch (rollout/think_budget.py): "off", "think" or "no_think" (the flag
    appended to the user message; no-think prompts are prefilled with an empty <think> block),
    or "both" (one mode per task, half and half)."""
    think_budget: int = 0
    """Qwen3 thinking budget: a turn's <think> block is cut after this many sampled tokens and
    `think_stop`'s phrase is inserted (loss mask 0) before the model answers; 0 = no budget."""
    think_stop: str = "qwen3"
    """Text inserted at the budget: "qwen3" (the report's "Considering the limited time by the
    user, ..." then </think>) or "short" (just </think>)."""
    infra_retries: int = 2
    """An episode whose tools' infrastructure failed (a ToolInfrastructureError: the retrieval
    or sandbox server unreachable, timed out or failing) is not the model's doing, so it is
    never trained on: its batch is replayed from the start with fresh envs (same tasks, groups
    and seed, so a seeded run plays what it would have played undisturbed) up to this many
    times, then the episode is dropped from the batch and counted (`infra_dropped`)."""
    infra_retry_wait_s: float = 2.0
    """Seconds before the n-th such replay: n x this (time for a server to come back)."""
    max_infra_drop_fraction: float = 0.25
    """Stop the run with an error when more than this fraction of a rollout batch's episodes
    had to be dropped for infrastructure failures: a dead server must not silently shrink
    every batch. 1.0 = never stop (an all-dropped batch still stops: nothing to train on)."""
    env_workers: int = 0
    """Worker threads that run env steps (tool calls) while the generator decodes the other
    episodes (rollout/schedule.py), in every rollout mode. 0 = lockstep: a turn's steps run
    after its `generate` call and every episode waits for the slowest step of the batch.
    k > 0 = each episode advances on its own: a slow step (sandboxed code, an HTTP tool, a
    browser) holds back only its own episode while the episodes whose observations are back
    keep decoding, and each episode's next turn reuses its own KV in whatever call it comes
    back. Sampling is seeded per episode and turn (each row its own stream: backends/streams.py;
    vLLM: a seed per request), so a row's draws do not depend on which episodes share a call;
    its logits do by float rounding (a batch's padding and width), so a token drawn next to a
    probability boundary can differ from lockstep's: on the tiny model float32 tokens agree
    bit for bit, bf16 ones only on a peaked policy (tests/backends/test_hf_seed.py).
    Default 0, because (1) lockstep is the schedule that reproduces a seeded run bit for bit:
    with k > 0 which episodes share a call follows the steps' timing; (2) the default recipe's
    tools step in process in milliseconds, where the engine's 20 ms gather keeps each turn one
    call anyway, so there is nothing to overlap; (3) the gain is not measured on the bundled
    model yet (bench/continuous_rollouts.py). Worth k > 0 where steps take as long as a
    decoding turn. Envs that declare `thread_safe = False` step on the rollout's own thread."""


def max_generated_tokens(rollout: RolloutConfig) -> int:
    """The most tokens the policy can generate in one episode (episode mode, with or without a
    context budget): the model's turns stop at rollout.max_turns x rollout.max_tokens_per_turn,
    and rollout.max_total_tokens bounds them and the observations together, so the smaller of
    the two is what an episode can actually reach. DAPO's L_max (the overlong penalty's full
    length) is this, not max_total_tokens alone: a penalty set against an unreachable length
    never fires. E.g. 3 turns x 48 tokens within 256: 144."""
    return min(rollout.max_total_tokens, rollout.max_turns * rollout.max_tokens_per_turn)


def max_sample_tokens(rollout: RolloutConfig) -> int:
    """The most tokens the policy can generate in one training row: one turn in step mode
    (each step is its own row), the whole episode's `max_generated_tokens` otherwise (a
    context-budget segment holds at most that many). Dr. GRPO's constant normaliser
    (algo.loss_agg=seq-mean-token-sum-norm). Memory mode is not bounded by the rollout config
    (its memory conversations have the env's own budget): validation refuses that pairing."""
    if rollout.mode == "step":
        return rollout.max_tokens_per_turn
    return max_generated_tokens(rollout)


@dataclass
class VLLMConfig:
    """rollout.backend=vllm: the vLLM engine that generates the rollouts (GPU only)."""

    gpu_memory_utilization: float = 0.5
    """Fraction of the GPU's memory vLLM takes for weights and KV cache; the rest is left for
    the learner on the same GPU."""
    dtype: str = "auto"
    """vLLM weight/activation dtype: auto (the model config's), bfloat16, float16 or float32."""
    max_model_len: int = 0
    """Longest context (prompt + completion) in tokens the engine accepts; 0 = the model's own
    limit. Lower values leave more memory for the KV cache."""
    sleep_level: int = 0
    """Free the engine's GPU memory while the learner updates (vLLM sleep mode): 0 = never,
    1 = offload weights to CPU and drop the KV cache, 2 = drop both (the new weights are loaded
    right after the update; not with LoRA, whose base weights are never re-sent)."""
    enforce_eager: bool = False
    """Run without CUDA graphs: faster start-up, slower decoding (smoke runs, debugging)."""
    max_images_per_prompt: int = 0
    """Vision-language policies (model/vision.py): the most pictures one request may carry, the
    engine's `limit_mm_per_prompt` (it reserves memory for that many per prompt). A prompt holds
    every picture its episode has shown so far, e.g. rollout.max_turns + 1 for an env that shows
    one per observation. 0 = a text-only engine; a vision-language model needs it > 0."""


@dataclass
class RayConfig:
    """Env and tool workers (and optionally the generator) on Ray actors (extra
    `agentic-rl[ray]`), so rollouts with slow tools spread over a cluster. The learner stays in
    the driver process."""

    enabled: bool = False
    """Run the envs (and their tools: retriever, sandbox...) on Ray actors."""
    address: str = ""
    """Cluster to join: "" starts a local one inside this process, "auto" joins the cluster this
    machine belongs to (`ray start`), "ray://HOST:10001" a remote one."""
    num_cpus: int = 0
    """Local cluster only: CPUs it may use (0 = every CPU of this machine)."""
    num_env_workers: int = 2
    """Env worker actors. Episodes are spread over them round-robin; their env steps (tool calls)
    run at the same time, one episode at a time per worker."""
    env_worker_cpus: float = 0.5
    """CPUs Ray reserves for each env worker (fractions allowed: tool calls mostly wait)."""
    max_episode_retries: int = 2
    """A worker lost mid-episode: the episode is replayed on a fresh worker (same reset seed, same
    actions, so its tokens do not change) up to this many times, then the run stops."""
    call_timeout_s: float = 120.0
    """An env call that has not returned after this long counts as a lost worker; keep it above
    env.tool_timeout_s."""
    generator_actor: bool = False
    """Generate in a Ray actor of its own (its own copy of the weights, sent after every update)
    placed with generator_cpus / generator_gpus, e.g. on a GPU node; off = in the driver."""
    generator_cpus: float = 1.0
    """CPUs Ray reserves for the generator actor."""
    generator_gpus: float = 0.0
    """GPUs Ray reserves for the generator actor (it moves its model to its GPU)."""
