"""Learning per wall-clock on the MULTI-TURN default task: this project vs TRL's own tool use.

The default recipe (`recipes/search_qa_grpo.yaml`): the model searches a generated corpus with
BM25 over several turns and answers; reward = exact match of the gold answer. TRL 1.16's
`GRPOTrainer(tools=[...])` runs the same loop its own way: the model emits a tool call and
ends its turn (EOS), TRL parses the call, runs the Python function, appends the result as a
`tool` chat turn and generates again, up to `max_tool_calling_iterations` times.

What TRL needed to run tool use with the bundled SmolLM2-135M-Instruct
- a chat template that renders tools: SmolLM2's ChatML template has none (GRPOTrainer refuses
  it: `supports_tool_calling` is False). SmolLM2 speaks ChatML (`<|im_start|>`/`<|im_end|>`,
  both in its vocabulary), the same markup as Qwen2.5, so the TRL side installs TRL's own
  copy of the Qwen2.5 template (`trl.chat_template_utils.qwen2_5_chat_template`, the file
  trl/chat_templates/qwen2_5.jinja) on SmolLM2's tokenizer. TRL recognises it by identity and
  sets its Qwen response parser (`add_response_schema`: `<tool_call>{json}</tool_call>` ->
  `tool_calls`); the template passes TRL's prefix-preservation check (its tool loop appends
  tool turns token by token), so TRL renders with it as is. The template lists the tool's JSON
  schema (from the function's type hints and docstring) in the system turn and asks for
  Hermes-style calls `<tool_call>\\n{"name": "search", "arguments": {"query": ...}}\\n</tool_call>`;
  tool results come back as `<|im_start|>user\\n<tool_response>\\n...\\n</tool_response><|im_end|>`.
- a system prompt for the answer format: "Answer the question using the search tool. ...
  write <answer>answer</answer>" (the template adds the tool-call instructions after it).
- a warm start, as the default recipe has one: a 135M model never writes a valid JSON tool
  call (nor our `<search>` tag) on its own, so both sides start RL from the recipe's supervised
  warm start on the same scripted-expert episodes (same tasks, same expert turns, same SFT code
  and settings: `warm_start.*` of the recipe), each rendered in its own side's format (ours:
  `<search>q</search>` with results inline; TRL: the template above with tool-call JSON and
  tool turns, loss on the assistant tokens only, each assistant turn ending in `<|im_end|>` as
  TRL's generation does). The warm start is not part of the timed budget on either side.

Matched settings (each from the recipe unless said): the bundled model (float32 weights,
--precision bf16 autocast on both sides, TRL `bf16=True`), 2 questions x 8 samples per step,
temperature 1, GRPO (group-normalised advantages, per-sequence token mean), the step's 16
episodes in 2 mini-batch updates (algo.ppo_mini_batches=2; TRL per_device_train_batch_size=8,
steps_per_generation=2), no KL, clip 0.2/0.28, lr (--lr, recipe 5e-6, constant), max grad norm
1, the same training questions in the same order (TRL's dataset is laid out in the order our
trainer draws them: rng seeded by (seed, step)), the same `search` tool
(`get_search_tool(topk=2)` through `call_tool`, the same result text), at most 4 model turns
(TRL `max_tool_calling_iterations=3`) of at most 48 tokens (TRL
`generation_kwargs={"max_new_tokens": 48}`), at most 400 tokens after the prompt, tool results
included (TRL `max_completion_length=400`). TRL's prompt is longer (~260 tokens: its template
lists the tool's JSON schema) than ours (~85). Reward: exact match of the `<answer>` text with
the gold answer (our env's `score_answer`), -0.1 for an episode that ends without an answer
(our env's format penalty; ours also takes it for each malformed turn). Reported success =
exact match, the same on both sides.

Evaluation (the same code for both final models, `evaluate`): greedy, the --eval-tasks held-out
questions (people never seen in training), multi-turn with the tool (up to 4 turns, 64 tokens a
turn, 400 in all), each model in the protocol it was trained in (ours: tags, results inline;
TRL's: its template, its parser, its tool-turn suffix), scored by the env's `step` (exact match).
"before" is after the warm start, before RL.

Per seed (0..K-1): each side runs in its own child process (--threads torch threads);
--parallel runs the two of a seed at the same time (use --threads 1 on 2 cores) so both see the
same machine load; otherwise ours first, then TRL. Reported: training-success curve vs
wall-clock (time = the RL steps only), TRL's level at the end of its budget (mean of its last
--window steps), the minutes ours needed to reach that level (first time its --window-step
moving average does), held-out before/after, searches and turns per episode for both sides
(a WARNING is printed when a side averages <= 1 turn: not multi-turn); median/min/max over seeds.

    .venv/bin/python bench/learning_vs_trl_multiturn.py --minutes 10 --seeds 3 --parallel --threads 1
    .venv/bin/python bench/learning_vs_trl_multiturn.py --minutes 0.5 --eval-tasks 4 --seeds 1  # smoke

Writes bench/results/learning_vs_trl_multiturn.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

RESULTS = Path(__file__).resolve().parent / "results" / "learning_vs_trl_multiturn.json"
RECIPE = "search_qa_grpo"
TRL_SYSTEM = (
    "Answer the question using the search tool. Search as often as you need. When you know the "
    "answer, write <answer>answer</answer> with only the answer inside."
)
ANSWER = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)


# ---------------------------------------------------------------------------------------------
# Shared pieces
# ---------------------------------------------------------------------------------------------


def recipe_config(args: argparse.Namespace, seed: int) -> Any:
    """The default recipe with this benchmark's overrides (seed, lr, precision, warm start)."""
    from agentic_rl.config.load import load_config

    mixed = "bf16" if args.precision == "bf16" else "no"
    return load_config(
        RECIPE,
        [
            f"trainer.seed={seed}",
            f"optim.lr={args.lr}",
            "algo.kl_coef=0.0",
            f"rollout.mixed_precision={mixed}",
            f"learner.mixed_precision={mixed}",
            f"warm_start.num_tasks={args.warm_start_tasks}",
            f"env.num_eval_tasks={args.eval_tasks}",
            "trainer.eval_before=false",
        ],
    )


def make_env(cfg: Any) -> Any:
    """One env as our trainer builds it (`envs.from_config.make_envs`)."""
    from agentic_rl.envs.from_config import make_envs

    return make_envs(cfg, 1)[0]


def step_tasks(cfg: Any, train_tasks: list, steps: int) -> list[list]:
    """The tasks our trainer draws at steps 0..steps-1 (`train.collect.collect`'s rng)."""
    out = []
    for step in range(steps):
        rng = random.Random(cfg.trainer.seed * 1_000_003 + step)
        out.append(rng.sample(list(train_tasks), cfg.rollout.tasks_per_step))
    return out


def search_text(topk: int, query: str) -> str:
    """What the env's `search` tool returns for `query` (BM25 top-k via `call_tool`)."""
    from agentic_rl.envs.search.single_hop import get_search_tool
    from agentic_rl.tools.base import call_tool

    return call_tool(get_search_tool(topk=topk), {"query": query}, 10.0, max_chars=2000).text


class TagProtocol:
    """Ours: `<search>q</search>` stops the turn, results inline as `<information>`."""

    def __init__(self, tokenizer: Any, env: Any) -> None:
        from agentic_rl.formats.chat import TagFormat

        self.tokenizer, self.fmt = tokenizer, TagFormat(env.tools)
        self.stop = list(self.fmt.stop)

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        from agentic_rl.model.tokens import encode_prompt

        return encode_prompt(self.tokenizer, messages)

    def parse(self, ids: list[int], context: list[int], finish: str) -> Any:
        return self.fmt.parse(self.tokenizer.decode(ids, skip_special_tokens=True), finish)

    def observation_ids(self, observation: Any) -> list[int]:
        from agentic_rl.model.tokens import encode_text

        return encode_text(self.tokenizer, self.fmt.render_observation(observation))


class TRLToolProtocol:
    """TRL's: the Qwen2.5 tool template, TRL's response parser, tool results as a tool turn
    (the suffix TRL's `_get_tool_suffix_ids` computes), generation until EOS."""

    stop: list[str] = []

    def __init__(self, tokenizer: Any, tool: Any, chat_template: str) -> None:
        self.tokenizer, self.tool, self.template = tokenizer, tool, chat_template

    def prompt_ids(self, messages: list[dict[str, str]]) -> list[int]:
        messages = [dict(m, content=TRL_SYSTEM) if m["role"] == "system" else m for m in messages]
        return self._ids(messages, generation=True)

    def _ids(self, messages: list[dict[str, Any]], generation: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages,
            tools=[self.tool],
            chat_template=self.template,
            add_generation_prompt=generation,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)

    def parse(self, ids: list[int], context: list[int], finish: str) -> Any:
        from trl.chat_template_utils import parse_response

        from agentic_rl.types import Action

        parsed = parse_response(self.tokenizer, ids, prefix=context, tools=[self.tool])
        calls = parsed.get("tool_calls") or []
        if calls:
            # malformed model output is an invalid turn (as TRL's tool loop counts a failure)
            function = calls[0].get("function", calls[0]) if isinstance(calls[0], dict) else {}
            arguments = function.get("arguments") if isinstance(function, dict) else None
            query = arguments.get("query") if isinstance(arguments, dict) else None
            if function.get("name") != "search" or not isinstance(query, str):
                return Action(kind="invalid", error="bad tool call", raw=str(parsed))
            return Action(kind="tool", name="search", arguments={"query": query}, raw=str(parsed))
        match = ANSWER.search(parsed.get("content") or "")
        if match:
            return Action(kind="answer", text=match.group(1).strip(), raw=parsed["content"])
        return Action(kind="none" if finish == "eos" else "invalid", raw=parsed.get("content", ""))

    def observation_ids(self, observation: Any) -> list[int]:
        # TRL's `_get_tool_suffix_ids`: what the template adds after an EOS-terminated
        # tool-calling assistant turn to append the tool turn and open the next assistant turn.
        call = [{"type": "function", "function": {"name": "search", "arguments": {}}}]
        head = [
            {"role": "user", "content": "dummy"},
            {"role": "assistant", "content": "", "tool_calls": call},
        ]
        prefix = self._ids_plain(head, generation=False)
        eos = self.tokenizer.eos_token_id
        prefix = prefix[: max(i for i, t in enumerate(prefix) if t == eos) + 1]
        tool = {"role": "tool", "name": "search", "content": observation.content}
        full = self._ids_plain([*head, tool], generation=True)
        assert full[: len(prefix)] == prefix, "template is not prefix-preserving"
        return full[len(prefix) :]

    def _ids_plain(self, messages: list[dict[str, Any]], generation: bool) -> list[int]:
        ids = self.tokenizer.apply_chat_template(
            messages,
            chat_template=self.template,
            add_generation_prompt=generation,
            tokenize=True,
            return_dict=False,
        )
        return list(ids)


def evaluate(
    model: Any,
    tokenizer: Any,
    protocol: Any,
    cfg: Any,
    tasks: list,
    turn_tokens: int = 64,
) -> dict[str, float]:
    """Greedy multi-turn held-out evaluation, the same loop for both frameworks' models:
    generate a turn for every live episode, parse it (the protocol's parser), step the env
    (the same search tool and exact-match scoring), append the observation tokens (the
    protocol's rendering); at most rollout.max_turns turns, rollout.max_total_tokens after the
    prompt. Returns success (exact match), searches and turns per episode."""
    from agentic_rl.backends.hf import HFGenerator
    from agentic_rl.types import SamplingParams

    t0 = time.perf_counter()
    model.eval()
    generator = HFGenerator(model, tokenizer, max_batch_size=len(tasks))
    envs = [make_env(cfg) for _ in tasks]
    contexts, starts = [], []
    for i, (env, task) in enumerate(zip(envs, tasks, strict=True)):
        ids = protocol.prompt_ids(env.reset(task, seed=i).messages)
        contexts.append(ids)
        starts.append(len(ids))
    success = [0.0] * len(tasks)
    searches = [0] * len(tasks)
    turns = [0] * len(tasks)
    live = list(range(len(tasks)))
    for _ in range(cfg.rollout.max_turns):
        if not live:
            break
        params = SamplingParams(max_new_tokens=turn_tokens, temperature=0.0, stop=protocol.stop)
        outs = generator.generate([contexts[i] for i in live], params)
        still = []
        for i, out in zip(live, outs, strict=True):
            turns[i] += 1
            action = protocol.parse(list(out.token_ids), contexts[i], out.finish_reason)
            contexts[i] = contexts[i] + list(out.token_ids)
            result = envs[i].step(action)
            if action.kind == "tool":
                searches[i] += 1
            if result.terminated:
                success[i] = float(result.info.get("success", 0.0))
                continue
            if result.observation is not None:
                contexts[i] += protocol.observation_ids(result.observation)
            if len(contexts[i]) - starts[i] < cfg.rollout.max_total_tokens:
                still.append(i)
        live = still
    n = len(tasks)
    return {
        "success": sum(success) / n,
        "searches_per_episode": sum(searches) / n,
        "turns_per_episode": sum(turns) / n,
        "seconds": time.perf_counter() - t0,
    }


# ---------------------------------------------------------------------------------------------
# Ours
# ---------------------------------------------------------------------------------------------


def run_ours(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    from agentic_rl.backends.base import sync_weights
    from agentic_rl.train.collect import expert_demos
    from agentic_rl.train.loop import train_step
    from agentic_rl.train.setup import build, make_optimizer, start_from_policy
    from agentic_rl.train.sft import warm_start_sft

    cfg = recipe_config(args, seed)
    setup = build(cfg)
    t0 = time.perf_counter()
    demos, episodes = expert_demos(setup, cfg.warm_start.num_tasks)
    warm = warm_start_sft(cfg, setup.policy, demos, setup.tokenizer.pad_token_id)
    sync_weights(setup.generator, setup.policy)
    start_from_policy(setup)
    warm_s = time.perf_counter() - t0
    protocol = TagProtocol(setup.tokenizer, make_env(cfg))
    held_out = setup.eval_tasks[: args.eval_tasks]
    before = evaluate(setup.policy, setup.tokenizer, protocol, cfg, held_out)
    print(f"[ours {seed}] warm start {warm_s:.0f}s, held-out before {before}", flush=True)
    optimizer = make_optimizer(setup)
    curve, elapsed, step = [], 0.0, 0
    while elapsed < args.minutes * 60:
        setup.policy.train()
        m = train_step(setup, optimizer, step)
        elapsed += m["step_seconds"]
        curve.append(
            {
                "step": step,
                "minutes": elapsed / 60,
                "success": m["success"],
                "reward": m["reward"],
                "searches_per_episode": m["tool_calls_per_episode"],
                "turns_per_episode": m["turns"],
                "response_tokens": m["response_tokens"],
            }
        )
        print(
            f"[ours {seed}] step {step} {elapsed / 60:.2f} min success {m['success']:.3f} "
            f"searches {m['tool_calls_per_episode']:.2f} turns {m['turns']:.2f}",
            flush=True,
        )
        step += 1
    after = evaluate(setup.policy, setup.tokenizer, protocol, cfg, held_out)
    print(f"[ours {seed}] held-out after {after}", flush=True)
    return {
        "curve": curve,
        "eval_before": before,
        "eval_after": after,
        "warm_start": {"episodes": episodes, "seconds": warm_s, **warm},
    }


# ---------------------------------------------------------------------------------------------
# TRL
# ---------------------------------------------------------------------------------------------


def make_search_function(topk: int) -> Any:
    def search(query: str) -> str:
        """Search the knowledge base and return the most relevant documents.

        Args:
            query: The search query, e.g. the name of the person the question is about.
        """
        return search_text(topk, query)

    return search


def trl_expert_demos(
    cfg: Any, train_tasks: list, tokenizer: Any, protocol: TRLToolProtocol
) -> tuple[list, int]:
    """The recipe's warm-start episodes (the tasks `train.collect.expert_demos` picks, the env's
    scripted expert) in TRL's format: assistant tool-call turns and the final answer are
    trained (each ends with EOS, as TRL's generation does), tool turns are not."""
    from agentic_rl.formats.chat import TagFormat
    from agentic_rl.types import Trajectory

    rng = random.Random(cfg.trainer.seed + 17)
    tasks = [rng.choice(train_tasks) for _ in range(cfg.warm_start.num_tasks)]
    env = make_env(cfg)
    tags = TagFormat(env.tools)
    eos = tokenizer.eos_token_id
    demos = []
    for i, task in enumerate(tasks):
        messages = [dict(m) for m in env.reset(task, seed=i).messages]
        messages[0]["content"] = TRL_SYSTEM
        ids = protocol.prompt_ids(messages)
        prompt_len = len(ids)
        mask = [0] * prompt_len
        spans: list[tuple[int, int]] = []
        reward, done = 0.0, False
        for _ in range(cfg.rollout.max_turns):
            action = tags.parse(env.expert_turn(), "stop")
            if action.kind == "tool":
                call = {"name": "search", "arguments": {"query": action.arguments["query"]}}
                msg = {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"type": "function", "function": call}],
                }
            else:
                msg = {"role": "assistant", "content": f"<answer>{action.text}</answer>"}
            full = protocol._ids([*messages, msg], generation=False)
            start = len(protocol._ids(messages, generation=True))
            assert full[:start] == ids[:start] or len(ids) == start, "not prefix-preserving"
            turn = full[start:]
            turn = turn[: turn.index(eos) + 1]  # the turn up to its EOS (TRL stops there)
            spans.append((len(ids), len(ids) + len(turn)))
            ids, mask = ids + turn, mask + [1] * len(turn)
            messages.append(msg)
            result = env.step(action)
            if result.terminated:
                reward, done = result.reward, True
                break
            assert result.observation is not None
            obs = protocol.observation_ids(result.observation)
            ids, mask = ids + obs, mask + [0] * len(obs)
            messages.append(
                {"role": "tool", "name": "search", "content": result.observation.content}
            )
        if done and reward >= 1.0:
            demos.append(
                Trajectory(
                    token_ids=ids,
                    loss_mask=mask,
                    logprobs=[0.0] * len(ids),
                    prompt_length=prompt_len,
                    turn_spans=spans,
                    step_rewards=[0.0] * len(spans),
                    reward=reward,
                    task_id=task.task_id,
                    group_id=f"expert:{i}",
                    terminated=True,
                )
            )
    return demos, len(demos)


def run_trl(args: argparse.Namespace, seed: int) -> dict[str, Any]:
    import torch
    import trl
    from datasets import Dataset
    from transformers import AutoModelForCausalLM, AutoTokenizer, TrainerCallback
    from trl import GRPOConfig
    from trl.chat_template_utils import (
        add_response_schema,
        get_training_chat_template,
        is_chat_template_prefix_preserving,
        qwen2_5_chat_template,
    )

    from agentic_rl.config.rollout import ModelConfig
    from agentic_rl.envs.from_config import make_tasks
    from agentic_rl.model.load import bundled_model_dir
    from agentic_rl.rewards.qa import exact_match
    from agentic_rl.train.sft import warm_start_sft

    cfg = recipe_config(args, seed)
    torch.manual_seed(seed)
    path = str(bundled_model_dir(ModelConfig()))
    policy = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    tokenizer = AutoTokenizer.from_pretrained(path, padding_side="left")
    tokenizer.chat_template = qwen2_5_chat_template  # TRL's copy; see the module docstring
    # TRL's parser for that template, set now (GRPOTrainer would set the same one) so that the
    # evaluation before training parses tool calls as training will
    add_response_schema(tokenizer)
    # What GRPOTrainer will render with: the tokenizer's template when it is prefix-preserving
    # (this one is), else TRL's training variant of it.
    template = (
        qwen2_5_chat_template
        if is_chat_template_prefix_preserving(tokenizer)
        else get_training_chat_template(tokenizer)
    )
    search = make_search_function(cfg.env.topk)
    protocol = TRLToolProtocol(tokenizer, search, template)
    train_tasks = make_tasks(cfg, "train")  # as our trainer's setup makes them
    eval_tasks = make_tasks(cfg, "eval")[: args.eval_tasks]

    t0 = time.perf_counter()
    demos, episodes = trl_expert_demos(cfg, train_tasks, tokenizer, protocol)
    warm = warm_start_sft(cfg, policy, demos, tokenizer.pad_token_id)
    warm_s = time.perf_counter() - t0
    before = evaluate(policy, tokenizer, protocol, cfg, eval_tasks)
    print(f"[trl {seed}] warm start {warm_s:.0f}s, held-out before {before}", flush=True)

    # The training questions in the order our trainer draws them (TRL: no shuffling, each
    # step takes the next tasks_per_step prompts).
    order = [t for tasks in step_tasks(cfg, train_tasks, args.max_steps) for t in tasks]
    env = make_env(cfg)
    rows = []
    for i, task in enumerate(order):
        messages = [dict(m) for m in env.reset(task, seed=i).messages]
        messages[0]["content"] = TRL_SYSTEM
        rows.append({"prompt": messages, "answers": list(task.answers)})
    dataset = Dataset.from_list(rows)
    penalty = cfg.env.format_penalty
    step_stats: list[dict[str, float]] = []

    def reward_fn(prompts, completions, answers, **kwargs):  # TRL's reward signature
        values, successes, searches, turns = [], [], [], []
        for completion, gold in zip(completions, answers, strict=True):
            assistant = [m for m in completion if m["role"] == "assistant"]
            searches.append(sum(m["role"] == "tool" for m in completion))
            turns.append(len(assistant))
            match = ANSWER.search(assistant[-1].get("content") or "") if assistant else None
            score = exact_match(match.group(1).strip(), gold) if match else -penalty
            values.append(score)
            successes.append(float(score >= 1.0))
        step_stats.append(
            {
                "reward": statistics.fmean(values),
                "success": statistics.fmean(successes),
                "searches_per_episode": statistics.fmean(searches),
                "turns_per_episode": statistics.fmean(turns),
            }
        )
        return values

    curve: list[dict[str, float]] = []

    mini = cfg.algo.ppo_mini_batches  # optimizer steps per generation batch, as ours

    class Budget(TrainerCallback):
        def on_train_begin(self, args_, state, control, **kw):
            self.t0 = time.perf_counter()

        def on_step_end(self, args_, state, control, **kw):
            if state.global_step % mini:
                return  # the generation batch's other mini-batch updates are still to come
            minutes = (time.perf_counter() - self.t0) / 60
            point = {"step": len(curve), "minutes": minutes, **step_stats[-1]}
            curve.append(point)
            print(
                f"[trl {seed}] step {point['step']} {minutes:.2f} min success "
                f"{point['success']:.3f} searches {point['searches_per_episode']:.2f} "
                f"turns {point['turns_per_episode']:.2f}",
                flush=True,
            )
            control.should_training_stop = minutes >= args.minutes

    group, prompts = cfg.rollout.group_size, cfg.rollout.tasks_per_step
    with tempfile.TemporaryDirectory(prefix="trl-multiturn-") as out_dir:
        config = GRPOConfig(
            output_dir=out_dir,
            # the step's 2 x 8 episodes in algo.ppo_mini_batches updates (Search-R1), as ours
            per_device_train_batch_size=prompts * group // mini,
            steps_per_generation=mini,
            gradient_accumulation_steps=1,
            num_generations=group,
            max_completion_length=cfg.rollout.max_total_tokens,
            max_tool_calling_iterations=cfg.rollout.max_turns - 1,
            # a model turn is at most rollout.max_tokens_per_turn tokens, as ours
            generation_kwargs={"max_new_tokens": cfg.rollout.max_tokens_per_turn},
            num_iterations=1,
            temperature=cfg.rollout.temperature,
            top_p=1.0,
            top_k=0,
            beta=0.0,
            loss_type="grpo",
            epsilon=cfg.algo.clip_low,
            epsilon_high=cfg.algo.clip_high,
            scale_rewards="group",
            learning_rate=cfg.optim.lr,
            lr_scheduler_type="constant",
            max_grad_norm=cfg.optim.max_grad_norm,
            bf16=args.precision == "bf16",
            fp16=False,
            activation_checkpointing=False,
            gradient_checkpointing=False,
            use_cpu=True,
            use_vllm=False,
            shuffle_dataset=False,
            max_steps=args.max_steps * mini,
            logging_steps=1,
            save_strategy="no",
            report_to="none",
            disable_tqdm=True,
            seed=seed,
            dataloader_num_workers=0,
        )
        trainer = trl.GRPOTrainer(
            model=policy,
            processing_class=tokenizer,
            reward_funcs=reward_fn,
            args=config,
            train_dataset=dataset,
            tools=[search],
            callbacks=[Budget()],
        )
        used_template = trainer.chat_template or tokenizer.chat_template
        assert used_template == template, "TRL trained with another template than evaluated"
        trainer.train()
        # TRL's own count per logged optimizer step: tool calls per episode, failed fraction
        tool_log = [
            {k: h[k] for k in ("step", "tools/call_frequency", "tools/failure_frequency") if k in h}
            for h in trainer.state.log_history
            if "tools/call_frequency" in h
        ]
    after = evaluate(trainer.model, tokenizer, protocol, cfg, eval_tasks)
    print(f"[trl {seed}] held-out after {after}", flush=True)
    return {
        "curve": curve,
        "eval_before": before,
        "eval_after": after,
        "warm_start": {"episodes": episodes, "seconds": warm_s, **warm},
        "trl_version": trl.__version__,
        "trl_tool_log": tool_log,
        "chat_template": "trl/chat_templates/qwen2_5.jinja"
        if template == qwen2_5_chat_template
        else "trl/chat_templates/qwen2_5_training.jinja",
    }


# ---------------------------------------------------------------------------------------------
# Parent
# ---------------------------------------------------------------------------------------------


def child_main(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(args.threads)
    side, seed = args.child.split(":")
    result = (run_ours if side == "ours" else run_trl)(args, int(seed))
    result["torch_threads"] = torch.get_num_threads()
    Path(args.result_file).write_text(json.dumps(result, indent=2, default=str))


def start_child(side: str, seed: int, args: argparse.Namespace, tmp: Path) -> tuple[Any, Path]:
    result = tmp / f"{side}-{seed}.json"
    cmd = [
        sys.executable,
        str(Path(__file__).resolve()),
        "--child",
        f"{side}:{seed}",
        "--result-file",
        str(result),
        *passthrough(args),
    ]
    env = dict(
        os.environ,
        TOKENIZERS_PARALLELISM="false",
        TRANSFORMERS_VERBOSITY="error",
        TRL_EXPERIMENTAL_SILENCE="1",
        OMP_NUM_THREADS=str(args.threads),
        MKL_NUM_THREADS=str(args.threads),
    )
    log = open(tmp / f"{side}-{seed}.log", "w")  # noqa: SIM115 (closed with the process)
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, text=True)
    return proc, result


def passthrough(args: argparse.Namespace) -> list[str]:
    return [
        "--minutes", str(args.minutes),
        "--lr", str(args.lr),
        "--precision", args.precision,
        "--eval-tasks", str(args.eval_tasks),
        "--warm-start-tasks", str(args.warm_start_tasks),
        "--max-steps", str(args.max_steps),
        "--threads", str(args.threads),
    ]  # fmt: skip


def wait_children(children: list[tuple[str, Any, Path]], tmp: Path) -> dict[str, Any]:
    """Wait for the children, echoing their progress lines; results by name."""
    out: dict[str, Any] = {}
    offsets = {name: 0 for name, _, _ in children}
    started = {name: time.perf_counter() for name, _, _ in children}
    pending = list(children)
    while pending:
        time.sleep(2)
        for name, _proc, _ in children:
            log = tmp / f"{name}.log"
            text = log.read_text() if log.exists() else ""
            for line in text[offsets[name] :].splitlines():
                if line.startswith(("[ours", "[trl")):
                    print(line, flush=True)
            offsets[name] = len(text)
        for item in list(pending):
            name, proc, result = item
            if proc.poll() is None:
                continue
            pending.remove(item)
            if proc.returncode != 0:
                tail = (tmp / f"{name}.log").read_text()[-5000:]
                raise SystemExit(f"{name} failed (exit {proc.returncode}):\n{tail}")
            out[name] = json.loads(result.read_text())
            out[name]["child_wall_s"] = time.perf_counter() - started[name]
    return out


def level(curve: list[dict[str, float]], window: int) -> float:
    return statistics.fmean(p["success"] for p in curve[-window:])


def minutes_to_reach(curve: list[dict[str, float]], target: float, window: int) -> float | None:
    """Wall-clock minutes at which the `window`-step moving average first reaches `target`."""
    for i in range(min(window, len(curve)) - 1, len(curve)):
        lo = max(0, i - window + 1)
        if statistics.fmean(p["success"] for p in curve[lo : i + 1]) >= target:
            return curve[i]["minutes"]
    return None


def seed_summary(ours: dict[str, Any], theirs: dict[str, Any], window: int) -> dict[str, Any]:
    target = level(theirs["curve"], window)
    last = {
        side: {
            key: statistics.fmean(p[key] for p in r["curve"][-window:])
            for key in ("searches_per_episode", "turns_per_episode")
        }
        for side, r in (("ours", ours), ("trl", theirs))
    }
    return {
        "trl_steps": len(theirs["curve"]),
        "ours_steps": len(ours["curve"]),
        "trl_level_at_budget": target,
        "ours_level_at_budget": level(ours["curve"], window),
        "ours_minutes_to_trl_level": minutes_to_reach(ours["curve"], target, window),
        "held_out_before": {"ours": ours["eval_before"], "trl": theirs["eval_before"]},
        "held_out_after": {"ours": ours["eval_after"], "trl": theirs["eval_after"]},
        "last_window_multiturn": last,
    }


def spread(values: list[float | None]) -> dict[str, float | None]:
    real = [v for v in values if v is not None]
    if not real:
        return {"median": None, "min": None, "max": None, "missing": len(values)}
    return {
        "median": statistics.median(real),
        "min": min(real),
        "max": max(real),
        "missing": len(values) - len(real),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--minutes", type=float, default=10.0, help="RL budget per side")
    parser.add_argument("--seeds", type=int, default=3, help="seeds 0..K-1")
    parser.add_argument("--lr", type=float, default=5e-6, help="both sides (recipe: 5e-6)")
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--window", type=int, default=5, help="steps in the moving average")
    parser.add_argument("--eval-tasks", type=int, default=50)
    parser.add_argument(
        "--warm-start-tasks",
        type=int,
        default=32,
        help="expert episodes of the warm start, both sides (recipe: 32; it already brings "
        "training success to ~0.6-0.9, fewer leave RL more to learn)",
    )
    parser.add_argument("--max-steps", type=int, default=400, help="cap on RL steps per side")
    parser.add_argument("--threads", type=int, default=1, help="torch threads per child")
    parser.add_argument(
        "--parallel", action="store_true", help="run ours and TRL of a seed at the same time"
    )
    parser.add_argument("--out", type=Path, default=RESULTS)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--result-file", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child_main(args)
        return

    import platform

    wall0 = time.perf_counter()
    per_seed: dict[str, Any] = {}
    raw: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="learning-mt-") as tmpdir:
        tmp = Path(tmpdir)
        for seed in range(args.seeds):
            results: dict[str, Any] = {}
            if args.parallel:
                kids = [(f"{s}-{seed}", *start_child(s, seed, args, tmp)) for s in ("ours", "trl")]
                results = wait_children(kids, tmp)
            else:
                for side in ("ours", "trl"):
                    kid = (f"{side}-{seed}", *start_child(side, seed, args, tmp))
                    results |= wait_children([kid], tmp)
            ours, theirs = results[f"ours-{seed}"], results[f"trl-{seed}"]
            per_seed[str(seed)] = seed_summary(ours, theirs, args.window)
            raw[str(seed)] = {"ours": ours, "trl": theirs}
            print(json.dumps(per_seed[str(seed)], indent=2), flush=True)
    seeds = list(per_seed.values())
    aggregate = {
        "trl_level_at_budget": spread([s["trl_level_at_budget"] for s in seeds]),
        "ours_level_at_budget": spread([s["ours_level_at_budget"] for s in seeds]),
        "ours_minutes_to_trl_level": spread([s["ours_minutes_to_trl_level"] for s in seeds]),
        "trl_steps": spread([s["trl_steps"] for s in seeds]),
        "ours_steps": spread([s["ours_steps"] for s in seeds]),
    }
    for when in ("held_out_before", "held_out_after"):
        for side in ("ours", "trl"):
            aggregate[f"{when}_{side}"] = spread([s[when][side]["success"] for s in seeds])
    multiturn = {
        side: {
            key: spread([s["last_window_multiturn"][side][key] for s in seeds])
            for key in ("searches_per_episode", "turns_per_episode")
        }
        for side in ("ours", "trl")
    }
    record = {
        "command": "python " + " ".join(sys.argv),
        "args": vars(args) | {"out": None},
        "machine": {
            "cpus": os.cpu_count(),
            "cpu": platform.processor() or platform.machine(),
            "load_average_at_end": os.getloadavg(),
        },
        "aggregate": aggregate,
        "multiturn_last_window": multiturn,
        "per_seed": per_seed,
        "raw": raw,
        "bench_wall_s": time.perf_counter() - wall0,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(record, indent=2, default=str))
    print(json.dumps({"aggregate": aggregate, "multiturn": multiturn}, indent=2))
    for side in ("ours", "trl"):
        turns = multiturn[side]["turns_per_episode"]["median"]
        if turns is not None and turns <= 1.0:
            print(f"WARNING: {side} averaged {turns:.2f} turns an episode: not multi-turn")
    for seed, r in per_seed.items():
        reach = r["ours_minutes_to_trl_level"]
        reached = f"{reach:.1f} min" if reach is not None else "not within its budget"
        before, after = r["held_out_before"], r["held_out_after"]
        print(
            f"seed {seed}: TRL after {args.minutes:g} min ({r['trl_steps']} steps): "
            f"{r['trl_level_at_budget']:.3f}; ours ({r['ours_steps']} steps) reached it after "
            f"{reached}; held-out ours {before['ours']['success']:.2f} -> "
            f"{after['ours']['success']:.2f}, TRL {before['trl']['success']:.2f} -> "
            f"{after['trl']['success']:.2f}"
        )
    print(f"wrote {args.out} ({record['bench_wall_s']:.0f} s)")


if __name__ == "__main__":
    main()
