"""GRPO step time on CPU: this project vs TRL's GRPOTrainer, same model, prompts and sampling.

Each framework runs in its own child process (so peak RSS is separable), and the children are
interleaved so that drift of a shared machine cancels out: `--rounds R` runs R rounds, each one
`ours` child and one `trl` child per precision, in the order ours, trl (precision by precision)
in even rounds and the exact reverse in odd rounds (A B | B A | A B ...). Every child loads its
model, runs `--warmup` unmeasured and `--steps` measured steps.

- model: the bundled SmolLM2-135M-Instruct, fp32, loaded from the safetensors cache
  (`agentic_rl.model.load.bundled_model_dir()`); TRL loads that directory by path.
- prompts: the opening messages (system + question) of `search_qa` training tasks, rendered by
  the model's chat template (both sides get token-identical prompts; the TRL child checks it).
  Step s uses tasks 2s and 2s+1 on both sides (TRL's dataset is not shuffled); every round
  repeats the same steps.
- sampling: 2 prompts x 8 completions = 16 per step, up to 64 new tokens, temperature 1,
  top-p 1, no top-k, stop at EOS only (no stop strings on either side).
- reward: 1 if the completion text (special tokens dropped) has an even number of characters,
  else 0: a pure function of the text, the same Python function on both sides, and mixed within
  almost every group so neither side can skip the update.
- one update per step (TRL num_iterations=1; ours algo.epochs=1), no KL, no reference model.
- precision (`--precision fp32`, `bf16`, or both, `fp32,bf16`): the same on both sides.

Ours is the single-turn equivalent of a training step: `HFGenerator.generate` on the 16 prompt
ids (the generator the trainer uses; identical prompts prefilled once), then the learner's
`collate_episodes` -> `compute_advantages` (GRPO) -> `update`, the same calls as
`trainer.train_step` minus the env (a single-turn env step is a string comparison). Step time
= rollout + reward + advantages + update, after warm-up steps.

Reported per framework and precision: median and min-max of the step, rollout and update time
over all measured steps of all rounds, and of the per-round medians; per round the ratio TRL
median step / ours median step, and the median ratio over rounds with its min-max. The result
JSON also records the machine: CPU model and the flags that decide the CPU kernels (avx2,
avx512f, avx512_bf16, avx512_vnni, amx_*), nproc, torch version, oneDNN (mkldnn) availability
and bf16 support, the OMP/MKL environment, each child's torch thread counts and the generator's
fast-path choices, and the load average before and after every child.

    # ~14 min on the idle 2-core CPU: TRL's attention measured per precision (--trl-attention
    # auto, the default), then 3 rounds (the default) x (fp32, bf16) x (ours, TRL)
    .venv/bin/python bench/vs_trl.py --precision fp32,bf16 --steps 3
    .venv/bin/python bench/vs_trl.py --rounds 1 --steps 1 --warmup 0 --max-new-tokens 8  # smoke

Writes bench/results/vs_trl.json (`--out`). stdout ends with `speedup_vs_trl: X.XX`: the median
over rounds of TRL's step time / ours; with several precisions, the lowest of their medians
(each precision's own line `speedup_vs_trl_<precision>: X.XX` comes before it). Result files
of one precision keep the keys of the single-run version (`summary` per framework,
`speedup_vs_trl`, `setup`, `machine`, `raw`), with `raw` now a list of children.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "vs_trl.json"
SEED = 0


# ---------------------------------------------------------------------------------------------
# Shared pieces (both children)
# ---------------------------------------------------------------------------------------------


def parity_reward(text: str) -> float:
    """1 if the completion text has an even number of characters: mixed, model-independent."""
    return 1.0 if len(text) % 2 == 0 else 0.0


def prompt_messages(n: int) -> list[list[dict[str, str]]]:
    """The opening chat messages of the first `n` search_qa training tasks."""
    from agentic_rl.envs.registry import TASKS, make_env

    tasks = TASKS["search_qa"]("train", n, SEED)
    env = make_env("search_qa")
    return [env.reset(task, seed=SEED + i).messages for i, task in enumerate(tasks)]


def rss_mib() -> float:
    """Current resident set size of this process (MiB)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def summary(values: list[float]) -> dict[str, float]:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "mean": statistics.fmean(values),
        "stdev": statistics.stdev(values) if len(values) > 1 else 0.0,
    }


# ---------------------------------------------------------------------------------------------
# Ours
# ---------------------------------------------------------------------------------------------


def our_config(
    max_new_tokens: int,
    group_size: int,
    prompts: int,
    lr: float,
    precision: str = "fp32",
    one_micro_batch: bool = False,
) -> Any:
    """The default recipe, single-turn, with this benchmark's sampling settings; precision
    "bf16" turns on bf16 autocast in generation and in the update (float32 weights);
    one_micro_batch: one forward/backward over all the step's completions (vs_trl: as TRL's
    per-device batch), else the recipe's micro-batch size."""
    from agentic_rl.config.load import load_config

    mixed = "bf16" if precision == "bf16" else "no"
    return load_config(
        "search_qa_grpo",
        [
            "rollout.max_turns=1",
            f"rollout.max_tokens_per_turn={max_new_tokens}",
            f"rollout.max_total_tokens={max_new_tokens}",
            f"rollout.group_size={group_size}",
            f"rollout.tasks_per_step={prompts}",
            "rollout.temperature=1.0",
            "rollout.top_p=1.0",
            f"optim.lr={lr}",
            "algo.kl_coef=0.0",
            # one update per step, as TRL's num_iterations=1 with steps_per_generation=1: the
            # default recipe's 2 PPO mini-batches would add a pi_old forward and a second
            # optimizer step (2026-12-02: that made ours' update 36-47% slower than TRL-equal)
            "algo.epochs=1",
            "algo.ppo_mini_batches=1",
            "algo.clip_high=0.2",  # (the recipe's clip-higher cannot bind in one on-policy step)
            f"rollout.mixed_precision={mixed}",
            f"learner.mixed_precision={mixed}",
            # TRL's per_device_train_batch_size = prompts x group size (ours packs them: each
            # prompt once, no padding)
            *([f"optim.micro_batch_size={prompts * group_size}"] if one_micro_batch else []),
        ],
    )


def our_step(
    cfg: Any,
    model: Any,
    tokenizer: Any,
    generator: Any,
    optimizer: Any,
    prompt_ids: list[list[int]],
    step: int,
    reward_fn: Any = None,
) -> dict[str, Any]:
    """One GRPO step of ours on `prompt_ids` (one per group): rollout -> reward -> advantages ->
    update. Returns timings and counts. `reward_fn(row, text)`, row = index among the step's
    prompt_ids x group_size completions (row // group_size is the prompt); default: parity of
    the text length."""
    from agentic_rl.learner.advantages import compute_advantages
    from agentic_rl.learner.batch import collate_episodes
    from agentic_rl.learner.update import update as learner_update
    from agentic_rl.types import SamplingParams, Trajectory

    group_size, max_new = cfg.rollout.group_size, cfg.rollout.max_tokens_per_turn
    expanded = [p for p in prompt_ids for _ in range(group_size)]
    t0 = time.perf_counter()
    sampling = SamplingParams(
        max_new_tokens=max_new, temperature=1.0, top_p=1.0, stop=[], seed=SEED * 100_000 + step
    )
    completions = generator.generate(expanded, sampling)
    t_rollout = time.perf_counter() - t0
    trajectories = []
    for i, (prompt, c) in enumerate(zip(expanded, completions, strict=True)):
        text = tokenizer.decode(c.token_ids, skip_special_tokens=True)
        reward = reward_fn(i, text) if reward_fn else parity_reward(text)
        n = len(c.token_ids)
        trajectories.append(
            [
                Trajectory(
                    token_ids=list(prompt) + list(c.token_ids),
                    loss_mask=[0] * len(prompt) + [1] * n,
                    logprobs=[0.0] * len(prompt) + list(c.logprobs),
                    prompt_length=len(prompt),
                    turn_spans=[(len(prompt), len(prompt) + n)],
                    step_rewards=[reward],
                    reward=reward,
                    group_id=f"{step}:{i // group_size}",
                    task_id=str(i // group_size),
                    truncated=c.finish_reason == "length",
                )
            ]
        )
    batch = collate_episodes(trajectories, tokenizer.pad_token_id)
    compute_advantages(batch, cfg.algo, cfg.gigpo)
    metrics = learner_update(model, optimizer, batch, cfg)
    t_step = time.perf_counter() - t0
    rewards = [t[0].reward for t in trajectories]
    tokens = sum(len(c.token_ids) for c in completions)
    return {
        "step": step,
        "step_s": t_step,
        "rollout_s": t_rollout,
        "update_s": t_step - t_rollout,
        "sequences": len(completions),
        "completion_tokens": tokens,
        "mean_completion_len": tokens / len(completions),
        "reward_mean": sum(rewards) / len(rewards),
        "constant_groups": sum(
            len(set(rewards[g : g + group_size])) == 1 for g in range(0, len(rewards), group_size)
        ),
        "trained_sequences": metrics.get("trained_sequences", float("nan")),
        "loss": metrics.get("loss", float("nan")),
    }


def make_optimizer(cfg: Any, model: Any) -> Any:
    """AdamW over the policy's parameters, as `trainer.make_optimizer` builds it."""

    from agentic_rl.learner.update import adamw

    params = [p for p in model.parameters() if p.requires_grad]
    return adamw(
        params,
        lr=cfg.optim.lr,
        betas=(cfg.optim.beta1, cfg.optim.beta2),
        weight_decay=cfg.optim.weight_decay,
    )


def run_ours(args: argparse.Namespace) -> dict[str, Any]:
    import torch

    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt

    torch.manual_seed(SEED)
    cfg = our_config(
        args.max_new_tokens,
        args.group_size,
        args.prompts,
        args.lr,
        args.precision,
        one_micro_batch=True,
    )
    model_cfg = ModelConfig(dtype="float32", fast_cpu_attention=not args.sdpa_only)
    model, tokenizer = load_policy(model_cfg, seed=SEED)
    rss_loaded = rss_mib()
    generator = HFGenerator(
        model,
        tokenizer,
        max_batch_size=args.prompts * args.group_size,
        mixed_precision=cfg.rollout.mixed_precision,
    )
    optimizer = make_optimizer(cfg, model)
    total = args.warmup + args.steps
    messages = prompt_messages(args.prompts * total)
    prompt_ids = [encode_prompt(tokenizer, m) for m in messages]

    steps = []
    for step in range(total):
        chosen = prompt_ids[step * args.prompts : (step + 1) * args.prompts]
        record = our_step(cfg, model, tokenizer, generator, optimizer, chosen, step)
        record["warmup"] = step < args.warmup
        steps.append(record)
        print(
            f"[ours] step {step}{' (warm-up)' if record['warmup'] else ''}: "
            f"{record['step_s']:.2f}s (rollout {record['rollout_s']:.2f}s, "
            f"{record['completion_tokens']} tokens), "
            f"trained {record['trained_sequences']:.0f}/{record['sequences']}",
            flush=True,
        )
    return {
        "framework": "agentic_rl",
        "settings": {
            "generator": "agentic_rl.backends.hf.HFGenerator (shared-prompt prefill, KV cache, "
            "finished rows leave the batch)",
            "update": "learner.update, algo.epochs=1 (on-policy ratio, no second forward)",
            "dtype": "float32",
            "mixed_precision": {
                "rollout": cfg.rollout.mixed_precision,
                "learner": cfg.learner.mixed_precision,
            },
            "attn_implementation": model.config._attn_implementation,
            "micro_batch_size": cfg.optim.micro_batch_size,
            "logprob_chunk_size": cfg.model.logprob_chunk_size,
            "loss_agg": cfg.algo.loss_agg,
            "clip": [cfg.algo.clip_low, cfg.algo.clip_high],
            "lr": cfg.optim.lr,
            "max_grad_norm": cfg.optim.max_grad_norm,
            "optimizer": "torch.optim.AdamW (fused, as trainer.make_optimizer)",
            "generate_calls": generator.calls,
            # bf16 only: which fast paths the generator chose (capability / measurement)
            "fast_paths": getattr(generator, "fast_paths", None),
            "prompt_tokens_prefilled": generator.prompt_tokens,
        },
        "rss_after_load_mib": rss_loaded,
        "steps": steps,
    }


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------


def trl_config(args: argparse.Namespace, output_dir: str) -> Any:
    from trl import GRPOConfig

    kwargs: dict[str, Any] = {
        "output_dir": output_dir,
        "per_device_train_batch_size": args.prompts * args.group_size,
        "gradient_accumulation_steps": 1,
        "num_generations": args.group_size,
        "max_completion_length": args.max_new_tokens,
        "num_iterations": 1,
        "temperature": 1.0,
        "top_p": 1.0,
        "top_k": 0,
        "beta": 0.0,  # no reference model (ours: algo.kl_coef=0)
        "loss_type": "grpo",  # per-sequence token mean, then mean over sequences (ours)
        "epsilon": 0.2,
        "epsilon_high": 0.28,  # clip range of the default recipe
        "scale_rewards": "group",
        "learning_rate": args.lr,
        "lr_scheduler_type": "constant",
        "max_grad_norm": 1.0,
        # The same precision as ours: bf16 mixed precision (autocast over float32 weights, TRL's
        # default) for --precision bf16, plain float32 for --precision fp32.
        "bf16": args.precision == "bf16",
        "fp16": False,
        # TRL's default is True; pointless at 135M (`gradient_checkpointing` is transformers 5's
        # deprecated alias of `activation_checkpointing`; setting both silences the warning).
        "activation_checkpointing": False,
        "gradient_checkpointing": False,
        "use_cpu": True,
        "use_vllm": False,
        "use_transformers_continuous_batching": args.trl_generation == "continuous_batching",
        "shuffle_dataset": False,
        "max_steps": args.warmup + args.steps,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "seed": SEED,
        "dataloader_num_workers": 0,
    }
    return GRPOConfig(**kwargs)


def run_trl(args: argparse.Namespace) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import bundled_model_dir, load_tokenizer
    from agentic_rl.model.tokens import encode_prompt

    torch.manual_seed(SEED)
    model_path = str(bundled_model_dir(ModelConfig()))
    total = args.warmup + args.steps
    messages = prompt_messages(args.prompts * total)
    dataset = Dataset.from_list([{"prompt": m} for m in messages])
    tokens_per_step: list[int] = []
    rewards_per_step: list[list[float]] = []

    def reward_fn(prompts, completions, completion_ids, **kwargs):  # TRL's reward signature
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        tokens_per_step.append(sum(len(ids) for ids in completion_ids))
        rewards = [parity_reward(t) for t in texts]
        rewards_per_step.append(rewards)
        return rewards

    step_times: list[float] = []
    gen_times: list[float] = []

    class StepTimer(TrainerCallback):
        def on_step_begin(self, args_, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args_, state, control, **kw):
            step_times.append(time.perf_counter() - self.t0)
            i = len(step_times) - 1
            print(
                f"[trl] step {i}{' (warm-up)' if i < args.warmup else ''}: {step_times[i]:.2f}s "
                f"(generate {gen_times[i] if i < len(gen_times) else float('nan'):.2f}s, "
                f"{tokens_per_step[i] if i < len(tokens_per_step) else 0} tokens)",
                flush=True,
            )

    with tempfile.TemporaryDirectory(prefix="trl-bench-") as out_dir:
        config = trl_config(args, out_dir)
        # The cached config.json (written from the GGUF load) has no `architectures` entry, which
        # TRL's `create_model_from_path` needs, so the model is loaded here exactly as TRL would
        # (AutoModelForCausalLM, fp32) and passed as an instance with its tokenizer.
        policy = AutoModelForCausalLM.from_pretrained(
            model_path, dtype=torch.float32, attn_implementation=args.trl_attention
        )
        processing = AutoTokenizer.from_pretrained(
            model_path, padding_side="left", truncation_side="left"
        )
        trainer = trl.GRPOTrainer(
            model=policy,
            processing_class=processing,
            reward_funcs=reward_fn,
            args=config,
            train_dataset=dataset,
            callbacks=[StepTimer()],
        )
        rss_loaded = rss_mib()
        # Same prompt tokens as ours? (TRL renders the chat template itself.)
        tokenizer = load_tokenizer(ModelConfig())
        ours_ids = [encode_prompt(tokenizer, m) for m in messages[: args.prompts]]
        try:
            trl_ids = trainer._tokenize_prompts(messages[: args.prompts])[0]
            prompts_match = [list(a) for a in trl_ids] == ours_ids
        except Exception as err:  # private API; the check is informative only
            prompts_match = f"not checked: {err!r}"
        # Time generation: wrap generate / generate_batch on the model instance TRL uses.
        model = trainer.model
        for name in ("generate", "generate_batch"):
            original = getattr(model, name, None)
            if original is None:
                continue

            def timed(*a, _orig=original, **kw):
                t = time.perf_counter()
                try:
                    return _orig(*a, **kw)
                finally:
                    gen_times.append(time.perf_counter() - t)

            setattr(model, name, timed)
        trainer.train()
        log_history = list(trainer.state.log_history)
        gen_kwargs = {k: v for k, v in getattr(trainer, "generation_kwargs", {}).items()}
        settings = {
            k: getattr(config, k)
            for k in (
                "per_device_train_batch_size",
                "gradient_accumulation_steps",
                "num_generations",
                "generation_batch_size",
                "steps_per_generation",
                "max_completion_length",
                "num_iterations",
                "temperature",
                "top_p",
                "top_k",
                "beta",
                "loss_type",
                "epsilon",
                "epsilon_high",
                "scale_rewards",
                "learning_rate",
                "lr_scheduler_type",
                "max_grad_norm",
                "bf16",
                "fp16",
                "gradient_checkpointing",
                "use_cpu",
                "use_vllm",
                "use_transformers_continuous_batching",
                "cache_implementation",
                "optim",
                "shuffle_dataset",
                "seed",
            )
        }
        settings["generation_path"] = (
            "model.generate_batch (transformers continuous batching)"
            if config.use_transformers_continuous_batching
            else "model.generate (transformers, DynamicCache, left-padded batch of 16)"
        )
        settings["generation_kwargs"] = {k: repr(v) for k, v in gen_kwargs.items()}
        settings["attn_implementation"] = getattr(model.config, "_attn_implementation", None)
        settings["model_dtype"] = str(next(model.parameters()).dtype)

    steps = []
    n = len(step_times)
    for i in range(n):
        rewards = rewards_per_step[i] if i < len(rewards_per_step) else []
        constant = sum(
            len(set(rewards[g : g + args.group_size])) == 1
            for g in range(0, len(rewards), args.group_size)
        )
        tokens = tokens_per_step[i] if i < len(tokens_per_step) else 0
        steps.append(
            {
                "step": i,
                "warmup": i < args.warmup,
                "step_s": step_times[i],
                "rollout_s": gen_times[i] if i < len(gen_times) else float("nan"),
                "update_s": step_times[i] - (gen_times[i] if i < len(gen_times) else 0.0),
                "completion_tokens": tokens,
                "mean_completion_len": tokens / max(len(rewards), 1),
                "reward_mean": sum(rewards) / max(len(rewards), 1),
                "constant_groups": constant,
                # TRL runs forward/backward on every row of the batch.
                "trained_sequences": float(len(rewards)),
            }
        )
    return {
        "framework": "trl",
        "trl_version": trl.__version__,
        "settings": settings,
        "prompts_token_identical": prompts_match,
        "rss_after_load_mib": rss_loaded,
        "steps": steps,
        "log_history": log_history,
    }


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------

PRECISIONS = ("fp32", "bf16")
CPU_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_tile", "amx_int8")


def thread_env() -> dict[str, str]:
    """The environment variables that set or pin the CPU threads of torch / OpenMP / MKL /
    oneDNN (those set)."""
    prefixes = ("OMP_", "MKL_", "KMP_", "ONEDNN_", "DNNL_", "GOMP_", "TORCH_")
    return {k: v for k, v in sorted(os.environ.items()) if k.startswith(prefixes)}


def cpu_info() -> dict[str, Any]:
    """CPU model name and the instruction-set flags that pick the kernels (from /proc/cpuinfo),
    plus what torch makes of them."""
    import torch

    name: str | None = None
    flags: set[str] = set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name" and name is None:
                name = value.strip()
            elif key.strip() == "flags" and not flags:
                flags = set(value.split())
    except OSError:
        pass
    mkldnn = torch.backends.mkldnn
    try:
        bf16 = bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        bf16 = False
    return {
        "model_name": name or platform.processor() or "unknown",
        "flags": {flag: flag in flags for flag in CPU_FLAGS},
        "nproc": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else None,
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "mkldnn_available": bool(mkldnn.is_available()),
        "mkldnn_bf16_supported": bf16,
    }


def child_main(args: argparse.Namespace) -> None:
    import torch

    result = run_ours(args) if args.child == "ours" else run_trl(args)
    result["peak_rss_mib"] = peak_rss_mib()
    result["torch_threads"] = torch.get_num_threads()
    result["torch_interop_threads"] = torch.get_num_interop_threads()
    result["thread_env"] = thread_env()
    result["precision"] = args.precision
    Path(args.result_file).write_text(json.dumps(result, indent=2, default=str))


ATTENTIONS = ("sdpa", "eager")  # TRL's model: the Transformers attention implementations


def trl_attention(choice: str, precision: str, chosen: dict[str, str] | None = None) -> str:
    """The TRL model's attn_implementation for `precision` under --trl-attention `choice`
    (`auto`: the one the calibration `chosen` for that precision)."""
    if choice == "auto":
        if not chosen or precision not in chosen:
            raise ValueError(f"--trl-attention auto: no calibrated choice for {precision}")
        return chosen[precision]
    if choice == "bf16-eager":
        return "eager" if precision == "bf16" else "sdpa"
    return choice


def faster_attention(calibration: dict[str, dict[str, Any]]) -> str:
    """The attention whose calibration child had the lower median measured step (a tie keeps
    the Transformers default, sdpa). `calibration`: attention -> that TRL child's result."""
    medians = {name: aggregate(result)["step_s"]["median"] for name, result in calibration.items()}
    return min(ATTENTIONS, key=lambda name: (medians.get(name, float("inf")), name != "sdpa"))


def calibrate_trl_attention(
    args: argparse.Namespace, precisions: list[str], log_dir: Path
) -> dict[str, dict[str, Any]]:
    """--trl-attention auto: per precision, one short TRL child with each attention (the order
    alternating by precision so a drift of the machine favours neither), and the faster one.
    Returns precision -> {"chosen", "median_step_s": {attention: s}, "steps_measured"}."""
    short = argparse.Namespace(**{**vars(args), "steps": args.calibration_steps, "warmup": 1})
    report: dict[str, dict[str, Any]] = {}
    for index, precision in enumerate(precisions):
        order = ATTENTIONS if index % 2 == 0 else ATTENTIONS[::-1]
        results = {
            name: run_child("trl", short, log_dir, precision, f"-cal-{precision}-{name}", name)
            for name in order
        }
        chosen = faster_attention(results)
        medians = {n: aggregate(r)["step_s"]["median"] for n, r in results.items()}
        report[precision] = {
            "chosen": chosen,
            "median_step_s": medians,
            "steps_measured": args.calibration_steps,
        }
        print(
            f"TRL attention, {precision}: {chosen} ("
            + ", ".join(f"{n} {m:.2f}s" for n, m in medians.items())
            + f" a step over {args.calibration_steps} measured steps)",
            flush=True,
        )
    return report


def run_child(
    name: str,
    args: argparse.Namespace,
    log_dir: Path,
    precision: str | None = None,
    tag: str = "",
    attention: str | None = None,
) -> dict[str, Any]:
    """Run one framework's child (`precision`, default args.precision) and return its result,
    with its wall time and the load average before and after it. `attention`: the TRL model's
    attn_implementation (default: what --trl-attention gives for `precision`)."""
    precision = precision or args.precision
    attention = attention or trl_attention(args.trl_attention, precision)
    result_file = log_dir / f"{name}{tag}.json"
    log_file = log_dir / f"{name}{tag}.log"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        name,
        "--result-file",
        str(result_file),
        "--steps",
        str(args.steps),
        "--warmup",
        str(args.warmup),
        "--max-new-tokens",
        str(args.max_new_tokens),
        "--prompts",
        str(args.prompts),
        "--group-size",
        str(args.group_size),
        "--lr",
        str(args.lr),
        "--trl-generation",
        args.trl_generation,
        "--precision",
        precision,
        "--trl-attention",
        attention,
        *(["--sdpa-only"] if args.sdpa_only else []),
    ]
    env = dict(os.environ, TOKENIZERS_PARALLELISM="false", TRANSFORMERS_VERBOSITY="error")
    load_before = os.getloadavg()
    t0 = time.perf_counter()
    with open(log_file, "w") as log:
        proc = subprocess.Popen(
            cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env
        )
        assert proc.stdout is not None
        for line in proc.stdout:
            log.write(line)
            if line.startswith(("[ours]", "[trl]")):
                print(f"{tag.strip('-')} {line}" if tag else line, end="", flush=True)
        proc.wait()
    if proc.returncode != 0:
        tail = log_file.read_text()[-4000:]
        raise SystemExit(f"{name} child failed (exit {proc.returncode}):\n{tail}")
    result = json.loads(result_file.read_text())
    result["child_wall_s"] = time.perf_counter() - t0
    result["load_average_before"] = load_before
    result["load_average_after"] = os.getloadavg()
    return result


def aggregate(result: dict[str, Any] | list[dict[str, Any]]) -> dict[str, Any]:
    """Summary of the measured steps of one child, or pooled over several (the rounds)."""
    results = result if isinstance(result, list) else [result]
    measured = [s for r in results for s in r["steps"] if not s["warmup"]]
    step = [s["step_s"] for s in measured]
    rollout = [s["rollout_s"] for s in measured]
    tokens = sum(s["completion_tokens"] for s in measured)
    return {
        "steps_measured": len(measured),
        "step_s": summary(step),
        "rollout_s": summary(rollout),
        "update_s": summary([s["update_s"] for s in measured]),
        "rollout_tokens_per_s": tokens / sum(rollout),
        "mean_completion_len": statistics.fmean(s["mean_completion_len"] for s in measured),
        "trained_sequences": [s["trained_sequences"] for s in measured],
        "constant_groups": [s["constant_groups"] for s in measured],
        "peak_rss_mib": max(r["peak_rss_mib"] for r in results),
        "rss_after_load_mib": statistics.median(r["rss_after_load_mib"] for r in results),
    }


def round_order(precisions: list[str], frameworks: list[str], rnd: int) -> list[tuple[str, str]]:
    """The children of round `rnd` as (precision, framework): precision by precision, ours
    before TRL; odd rounds run the exact reverse, so a linear drift of the machine's speed
    weighs on both frameworks alike over each pair of rounds."""
    order = [(p, f) for p in precisions for f in frameworks]
    return order[::-1] if rnd % 2 else order


def per_round(children: list[dict[str, Any]], rounds: int) -> list[dict[str, Any]]:
    """Per round of one precision: each framework's median step / rollout / update and the
    ratios TRL / ours (when both ran)."""
    rows = []
    for rnd in range(rounds):
        row: dict[str, Any] = {"round": rnd}
        for child in children:
            if child["round"] != rnd:
                continue
            agg = aggregate(child)
            fw = child["bench_framework"]
            row[fw] = {k: agg[k]["median"] for k in ("step_s", "rollout_s", "update_s")}
            row[fw]["position"] = child["position"]
        if "ours" in row and "trl" in row:
            for key in ("step_s", "rollout_s", "update_s"):
                name = "speedup" if key == "step_s" else key.replace("_s", "_ratio")
                row[name] = row["trl"][key] / row["ours"][key]
        rows.append(row)
    return rows


def precision_report(children: list[dict[str, Any]], rounds: int) -> dict[str, Any]:
    """Pooled summary per framework, per-round medians and ratios, and their spread."""
    frameworks = sorted({c["bench_framework"] for c in children})
    pooled = {
        fw: aggregate([c for c in children if c["bench_framework"] == fw]) for fw in frameworks
    }
    rows = per_round(children, rounds)
    over_rounds = {
        fw: {
            key: summary([row[fw][key] for row in rows if fw in row])
            for key in ("step_s", "rollout_s", "update_s")
        }
        for fw in frameworks
    }
    report: dict[str, Any] = {"summary": pooled, "round_medians": over_rounds, "rounds": rows}
    for key in ("speedup", "rollout_ratio", "update_ratio"):
        values = [row[key] for row in rows if key in row]
        if values:
            report[key] = summary(values)
    return report


def print_precision(precision: str, report: dict[str, Any], trl_version: str | None) -> None:
    agg = report["summary"]
    print(f"\n## {precision}: all measured steps pooled over rounds")
    print(
        "| framework | step s median (min-max) | rollout s | update s | rollout tok/s "
        "| mean completion len | steps | peak RSS MiB |"
    )
    print("|---|---:|---:|---:|---:|---:|---:|---:|")
    for name, r in sorted(agg.items(), key=lambda kv: kv[0] != "trl"):
        label = f"TRL {trl_version}" if name == "trl" else "agentic_rl"
        print(
            f"| {label} | {r['step_s']['median']:.2f} ({r['step_s']['min']:.2f}-"
            f"{r['step_s']['max']:.2f}) | {r['rollout_s']['median']:.2f} "
            f"({r['rollout_s']['min']:.2f}-{r['rollout_s']['max']:.2f}) "
            f"| {r['update_s']['median']:.2f} ({r['update_s']['min']:.2f}-"
            f"{r['update_s']['max']:.2f}) | {r['rollout_tokens_per_s']:.0f} "
            f"| {r['mean_completion_len']:.1f} | {r['steps_measured']} "
            f"| {r['peak_rss_mib']:.0f} |"
        )
    print(f"\n## {precision}: per round (median step s of each child; ratio TRL/ours)")
    print(
        "| round | order | ours step s | TRL step s | step ratio | rollout ratio | update ratio |"
    )
    print("|---:|---|---:|---:|---:|---:|---:|")
    for row in report["rounds"]:
        order = (
            "ours first"
            if row.get("ours", {}).get("position", 0) < row.get("trl", {}).get("position", 1)
            else "TRL first"
        )

        def cell(fw: str, row: dict[str, Any] = row) -> str:
            return f"{row[fw]['step_s']:.2f}" if fw in row else "-"

        def ratio(key: str, row: dict[str, Any] = row) -> str:
            return f"{row[key]:.2f}" if key in row else "-"

        print(
            f"| {row['round']} | {order} | {cell('ours')} | {cell('trl')} | {ratio('speedup')} "
            f"| {ratio('rollout_ratio')} | {ratio('update_ratio')} |"
        )
    for fw, over in sorted(report["round_medians"].items(), key=lambda kv: kv[0] != "trl"):
        label = f"TRL {trl_version}" if fw == "trl" else "agentic_rl"
        print(
            f"{precision} {label}, per-round medians, median (min-max): "
            + ", ".join(
                f"{key[:-2]} {v['median']:.2f} s ({v['min']:.2f}-{v['max']:.2f})"
                for key, v in over.items()
            )
        )
    if "speedup" in report:
        s, ro, up = report["speedup"], report["rollout_ratio"], report["update_ratio"]
        print(
            f"\n{precision} ratios TRL/ours over rounds, median (min-max): step {s['median']:.2f}x "
            f"({s['min']:.2f}-{s['max']:.2f}), rollout {ro['median']:.2f}x "
            f"({ro['min']:.2f}-{ro['max']:.2f}), update {up['median']:.2f}x "
            f"({up['min']:.2f}-{up['max']:.2f})"
        )


def parse_precisions(text: str) -> list[str]:
    """ "fp32", "bf16" or a comma-separated list of them (each once, in the given order)."""
    chosen = [p.strip() for p in text.split(",") if p.strip()]
    bad = [p for p in chosen if p not in PRECISIONS]
    if not chosen or bad or len(set(chosen)) != len(chosen):
        raise argparse.ArgumentTypeError(
            f"--precision: one or more of {', '.join(PRECISIONS)}, comma-separated, each once; "
            f"got {text!r}"
        )
    return chosen


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--steps", type=int, default=4, help="measured steps per child")
    parser.add_argument("--warmup", type=int, default=1, help="warm-up steps per child")
    parser.add_argument(
        "--rounds",
        type=int,
        default=3,
        help="interleaved rounds; each runs one child per framework and precision, the order "
        "reversed every other round",
    )
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--prompts", type=int, default=2, help="prompts per step")
    parser.add_argument("--group-size", type=int, default=8, help="completions per prompt")
    parser.add_argument("--lr", type=float, default=5e-6)
    parser.add_argument(
        "--trl-generation",
        choices=["generate", "continuous_batching"],
        default="generate",
        help="TRL's generation path without vLLM",
    )
    parser.add_argument(
        "--precision",
        default="fp32",
        help="fp32, bf16, or both (fp32,bf16), on both sides: float32, or bf16 autocast over "
        "float32 weights (TRL bf16=True)",
    )
    parser.add_argument(
        "--trl-attention",
        choices=["auto", *ATTENTIONS, "bf16-eager"],
        default="auto",
        help="TRL model's attn_implementation. auto: per precision, measured first (one short "
        "TRL child with each, --calibration-steps measured steps) and the faster kept, so ours "
        "is compared with TRL's faster choice on this machine; sdpa (the Transformers default) "
        "or eager: fixed; bf16-eager: eager in bf16, sdpa in fp32 (the faster per precision "
        "on one earlier 2-core machine)",
    )
    parser.add_argument(
        "--calibration-steps",
        type=int,
        default=2,
        help="measured steps of each --trl-attention auto calibration child (after 1 warm-up)",
    )
    parser.add_argument(
        "--sdpa-only",
        action="store_true",
        help="ours with model.fast_cpu_attention=false (an ablation: bf16 attention on SDPA)",
    )
    parser.add_argument("--only", choices=["ours", "trl"], help="run one framework only")
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", choices=["ours", "trl"], help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    try:
        precisions = parse_precisions(args.precision)
    except argparse.ArgumentTypeError as err:
        parser.error(str(err))
    if args.child:
        if len(precisions) != 1:
            parser.error("a child runs one precision")
        child_main(args)
        return
    if args.rounds < 1 or args.steps < 1 or args.warmup < 0 or args.calibration_steps < 1:
        parser.error("--rounds, --steps and --calibration-steps must be >= 1, --warmup >= 0")

    import torch
    import transformers

    wall0 = time.perf_counter()
    frameworks = [f for f in ("ours", "trl") if not args.only or args.only == f]
    machine: dict[str, Any] = {
        "cpu": cpu_info(),
        "cpus": os.cpu_count(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "thread_env": thread_env(),
        "load_average_at_start": os.getloadavg(),
    }
    print(
        f"machine: {machine['cpu']['model_name']}, nproc {machine['cpus']}, flags "
        f"{','.join(k for k, v in machine['cpu']['flags'].items() if v) or '-'}, torch "
        f"{machine['torch']} ({machine['cpu']['torch_cpu_capability']}), env "
        f"{machine['thread_env'] or '-'}",
        flush=True,
    )
    children: list[dict[str, Any]] = []
    with tempfile.TemporaryDirectory(prefix="vs-trl-") as tmp:
        calibration: dict[str, dict[str, Any]] = {}
        if args.trl_attention == "auto" and "trl" in frameworks:
            calibration = calibrate_trl_attention(args, precisions, Path(tmp))
        chosen = {p: c["chosen"] for p, c in calibration.items()}
        position = 0
        for rnd in range(args.rounds):
            for precision, name in round_order(precisions, frameworks, rnd):
                tag = f"-r{rnd}-{precision}"
                # the ours child takes no attention from this flag (model.fast_cpu_attention)
                attention = (
                    trl_attention(args.trl_attention, precision, chosen)
                    if name == "trl"
                    else "sdpa"
                )
                result = run_child(name, args, Path(tmp), precision, tag, attention)
                result.update(bench_framework=name, round=rnd, position=position)
                position += 1
                children.append(result)
    reports = {
        p: precision_report([c for c in children if c["precision"] == p], args.rounds)
        for p in precisions
    }
    trl_version = next((c["trl_version"] for c in children if c["bench_framework"] == "trl"), None)
    trl_child = next((c for c in children if c["bench_framework"] == "trl"), None)
    if trl_child is not None:
        print(f"\nTRL {trl_version} GRPOTrainer settings ({trl_child['precision']}):")
        for key, value in trl_child["settings"].items():
            print(f"  {key}: {value}")
        matched = {c["prompts_token_identical"] for c in children if "prompts_token_identical" in c}
        print(f"  prompts token-identical to ours: {' / '.join(map(str, matched))}")
    for precision, report in reports.items():
        print_precision(precision, report, trl_version)
    by_precision = {p: r["speedup"]["median"] for p, r in reports.items() if "speedup" in r}
    speedup = min(by_precision.values()) if by_precision else None
    machine["torch_threads"] = {
        f"{c['bench_framework']}-r{c['round']}-{c['precision']}": c.get("torch_threads")
        for c in children
    }
    machine["load_average_at_end"] = os.getloadavg()
    record: dict[str, Any] = {
        "schema": 2,
        "command": "python " + " ".join(sys.argv),
        "setup": {
            "precision": precisions[0] if len(precisions) == 1 else precisions,
            "precisions": precisions,
            "rounds": args.rounds,
            "order": "per round: precision by precision, ours then TRL; odd rounds reversed",
            "trl_attention": args.trl_attention,
            "trl_attention_by_precision": {
                p: trl_attention(args.trl_attention, p, chosen)
                for p in precisions
                if "trl" in frameworks
            },
            "trl_attention_calibration": calibration,
            "ours_sdpa_only": args.sdpa_only,
            "prompts_per_step": args.prompts,
            "group_size": args.group_size,
            "max_new_tokens": args.max_new_tokens,
            "temperature": 1.0,
            "warmup_steps": args.warmup,
            "measured_steps": args.steps,
            "reward": "1 if len(completion text without special tokens) is even else 0",
            "prompts": "search_qa train tasks (seed 0), system + question, chat template",
        },
        "machine": machine,
        "precisions": reports,
        "speedup_vs_trl": speedup,
        "speedup_vs_trl_by_precision": by_precision,
        "children": [
            {
                "framework": c["bench_framework"],
                "precision": c["precision"],
                "round": c["round"],
                "position": c["position"],
                "child_wall_s": c["child_wall_s"],
                "load_average_before": c["load_average_before"],
                "load_average_after": c["load_average_after"],
                "torch_threads": c.get("torch_threads"),
                "torch_interop_threads": c.get("torch_interop_threads"),
                "thread_env": c.get("thread_env"),
                "fast_paths": c.get("settings", {}).get("fast_paths"),
            }
            for c in children
        ],
        "raw": children,
        "bench_wall_s": time.perf_counter() - wall0,
    }
    if len(precisions) == 1:  # the keys of the single-run version
        record["summary"] = reports[precisions[0]]["summary"]
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(f"\nwrote {args.out} ({record['bench_wall_s']:.0f} s)")
    for precision, value in by_precision.items():
        if len(by_precision) > 1:
            print(f"speedup_vs_trl_{precision}: {value:.2f}")
    if speedup is not None:
        print(f"speedup_vs_trl: {speedup:.2f}")


if __name__ == "__main__":
    main()
