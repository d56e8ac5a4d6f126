"""Learning per wall-clock on CPU: this project vs TRL's GRPOTrainer, same task, same budget.

The single-turn variant of the default task: the prompt already holds the top-3 BM25 results
for the question (what the agent's first search would return), and the model answers in one
completion. (Written when TRL's GRPOTrainer could not run multi-turn tool use; TRL 1.16 can,
and `learning_vs_trl_multiturn.py` compares the two on the multi-turn protocol itself.)

- model: the bundled SmolLM2-135M-Instruct, fp32, from the same weights on both sides;
- data: `search_qa` train questions in the same order (step s: questions 2s and 2s+1), 8 samples
  each (16 per step), up to 64 new tokens, temperature 1;
- reward: cover exact match, 1 if the normalised gold answer appears in the completion, the
  same function on both sides; GRPO, one update per step, no KL, clip 0.2/0.28, lr --lr;
- precision: --precision on both sides (float32, or bf16 autocast over float32 weights);
  held-out evaluation always in float32;
- budget: --minutes of training wall-clock for each side (model loading and evaluation are not
  counted); each side runs alone on the machine, ours first.

Reported: the training-reward curve against wall-clock, TRL's level at the end of its budget
(mean reward of its last --window steps), the minutes ours needed to reach that level (first
time its --window-step moving average does), and a greedy held-out evaluation (--eval-tasks
questions about people never seen in training, same code for both final models).

    .venv/bin/python bench/learning_vs_trl.py                   # 2 x 10 min + evaluations
    .venv/bin/python bench/learning_vs_trl.py --minutes 1 --eval-tasks 8   # smoke

Writes bench/results/learning_vs_trl.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from vs_trl import SEED, make_optimizer, our_config, our_step, trl_config  # noqa: E402

RESULTS = Path(__file__).resolve().parent / "results" / "learning_vs_trl.json"
SYSTEM = (
    "Answer the question using the search results. Write the answer between <answer> and "
    "</answer>, with only the answer inside."
)


def single_turn_tasks(split: str, n: int) -> list[tuple[list[dict[str, str]], list[str]]]:
    """(chat messages, gold answers) of `n` search_qa questions with their BM25 results."""
    from agentic_rl.envs.search.single_hop import get_search_tool, make_search_qa_tasks

    search = get_search_tool()
    out = []
    for task in make_search_qa_tasks(split, n, SEED):  # type: ignore[arg-type]
        user = f"Search results:\n{search(task.prompt)}\n\nQuestion: {task.prompt}"
        messages = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]
        out.append((messages, list(task.answers)))
    return out


def reward(text: str, answers: list[str]) -> float:
    from agentic_rl.rewards.qa import cover_exact_match

    return cover_exact_match(text, answers)


def evaluate(model: Any, tokenizer: Any, tasks: list) -> float:
    """Greedy held-out success (cover EM), the same code for both frameworks' final models."""
    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.model.tokens import encode_prompt
    from agentic_rl.types import SamplingParams

    model.eval()
    generator = HFGenerator(model, tokenizer, max_batch_size=16)
    prompts = [encode_prompt(tokenizer, m) for m, _ in tasks]
    outs = generator.generate(prompts, SamplingParams(max_new_tokens=64, temperature=0.0))
    texts = [tokenizer.decode(o.token_ids, skip_special_tokens=True) for o in outs]
    return statistics.fmean(reward(t, a) for t, (_, a) in zip(texts, tasks, strict=True))


def run_ours(args: argparse.Namespace, train: list, held_out: list) -> dict[str, Any]:
    import torch

    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import load_policy
    from agentic_rl.model.tokens import encode_prompt

    torch.manual_seed(SEED)
    # one micro-batch for the step's 2 x 8 completions, as TRL's per-device batch
    cfg = our_config(
        64, args.group_size, args.prompts, args.lr, args.precision, one_micro_batch=True
    )
    model, tokenizer = load_policy(ModelConfig(dtype="float32"), seed=SEED)
    before = evaluate(model, tokenizer, held_out)
    generator = HFGenerator(
        model,
        tokenizer,
        max_batch_size=args.prompts * args.group_size,
        mixed_precision=cfg.rollout.mixed_precision,
    )
    optimizer = make_optimizer(cfg, model)
    curve, elapsed, step = [], 0.0, 0
    while elapsed < args.minutes * 60:
        chosen = train[step * args.prompts : (step + 1) * args.prompts]
        prompts = [encode_prompt(tokenizer, m) for m, _ in chosen]

        def row_reward(row: int, text: str, _chosen: list = chosen) -> float:
            return reward(text, _chosen[row // args.group_size][1])

        model.train()
        record = our_step(cfg, model, tokenizer, generator, optimizer, prompts, step, row_reward)
        elapsed += record["step_s"]
        curve.append({"step": step, "minutes": elapsed / 60, "reward": record["reward_mean"]})
        print(f"[ours] step {step} {elapsed / 60:.2f} min reward {record['reward_mean']:.3f}")
        step += 1
    after = evaluate(model, tokenizer, held_out)
    return {"curve": curve, "eval_before": before, "eval_after": after}


def run_trl(args: argparse.Namespace, train: list, held_out: list) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback

    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.model.load import bundled_model_dir, load_tokenizer

    torch.manual_seed(SEED)
    path = str(bundled_model_dir(ModelConfig()))
    dataset = Dataset.from_list([{"prompt": m, "answers": a} for m, a in train])
    step_rewards: list[float] = []

    def reward_fn(prompts, completions, answers, **kwargs):  # TRL's reward signature
        texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
        values = [reward(t, a) for t, a in zip(texts, answers, strict=True)]
        step_rewards.append(statistics.fmean(values))
        return values

    curve: list[dict[str, float]] = []

    class Budget(TrainerCallback):
        def on_train_begin(self, args_, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args_, state, control, **kw):
            minutes = (time.perf_counter() - self.t0) / 60
            step = len(curve)
            curve.append({"step": step, "minutes": minutes, "reward": step_rewards[-1]})
            print(f"[trl] step {step} {minutes:.2f} min reward {step_rewards[-1]:.3f}", flush=True)
            control.should_training_stop = minutes >= args.minutes

    cfg_args = argparse.Namespace(
        prompts=args.prompts,
        group_size=args.group_size,
        max_new_tokens=64,
        lr=args.lr,
        warmup=0,
        steps=len(train) // args.prompts,
        trl_generation="generate",
        precision=args.precision,
    )
    with tempfile.TemporaryDirectory(prefix="trl-learning-") as out_dir:
        policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
        processing = AutoTokenizer.from_pretrained(path, padding_side="left")
        trainer = trl.GRPOTrainer(
            model=policy,
            processing_class=processing,
            reward_funcs=reward_fn,
            args=trl_config(cfg_args, out_dir),
            train_dataset=dataset,
            callbacks=[Budget()],
        )
        trainer.train()
    after = evaluate(trainer.model, load_tokenizer(ModelConfig()), held_out)
    return {"curve": curve, "eval_after": after, "trl_version": trl.__version__}


def level(curve: list[dict[str, float]], window: int) -> float:
    return statistics.fmean(p["reward"] for p in curve[-window:])


def minutes_to_reach(curve: list[dict[str, float]], target: float, window: int) -> float | None:
    """Wall-clock minutes at which the `window`-step moving average first reaches `target`."""
    for i in range(window - 1, len(curve)):
        if statistics.fmean(p["reward"] for p in curve[i - window + 1 : i + 1]) >= target:
            return curve[i]["minutes"]
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="training budget per side")
    parser.add_argument("--lr", type=float, default=1e-5)
    parser.add_argument("--prompts", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument(
        "--precision",
        choices=["fp32", "bf16"],
        default="fp32",
        help="both sides: float32, or bf16 autocast over float32 weights (TRL bf16=True)",
    )
    parser.add_argument("--window", type=int, default=5, help="steps in the moving average")
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()

    train = single_turn_tasks("train", 400)
    held_out = single_turn_tasks("eval", args.eval_tasks)
    ours = run_ours(args, train, held_out)
    gc.collect()
    theirs = run_trl(args, train, held_out)

    target = level(theirs["curve"], args.window)
    reach = minutes_to_reach(ours["curve"], target, args.window)
    summary = {
        "trl_steps": len(theirs["curve"]),
        "ours_steps": len(ours["curve"]),
        "trl_level_at_budget": target,
        "ours_level_at_budget": level(ours["curve"], args.window),
        "ours_minutes_to_trl_level": reach,
        "held_out_before": ours["eval_before"],
        "held_out_after": {"ours": ours["eval_after"], "trl": theirs["eval_after"]},
    }
    print(json.dumps(summary, indent=2))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    record = {"command": "python " + " ".join(sys.argv), "args": vars(args) | {"out": None}}
    record |= {"summary": summary, "ours": ours, "trl": theirs}
    args.out.write_text(json.dumps(record, indent=2, default=str))
    reached = f"{reach:.1f} min" if reach is not None else "not within the budget"
    print(
        f"TRL after {args.minutes:g} min: {target:.3f}; ours reached it after {reached}; "
        f"held-out {summary['held_out_before']:.2f} -> ours {ours['eval_after']:.2f}, "
        f"TRL {theirs['eval_after']:.2f}"
    )


if __name__ == "__main__":
    main()
