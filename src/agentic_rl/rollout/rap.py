"""RAP (Hao et al. 2023): the policy model as world model and as evaluator, searched with MCTS
(rollout/mcts.py); and the chain-of-thought baseline it is compared with.

Any env that can be simulated in text can be planned on: it implements `TextDomain` (state
text, goal text, rule-enumerated actions of a state text, closeness to the goal of a state
text, and optionally an exact text simulator). Blocksworld does (envs/games/blocksworld.py).

The four rewards of RAP, each from the model on a plain-text few-shot prompt:
- action likelihood: log p(action | state, goal) under the planning prompt (fast reward);
- self-evaluation: log p(" good" | state, goal, action, "Is this action good?") (fast reward);
- state confidence: the world model's greedy prediction of the next state, its mean token
  probability (RAP samples several predictions and takes the share of the most frequent one;
  one greedy sample and its probability cost one call instead of several: a difference);
- closeness to goal: the fraction of goal clauses true in the predicted state, `goal_reward`
  when all are (the task heuristic RAP uses for Blocksworld).
They combine as `algos.mcts.rap_reward`. `world_model="exact"` replaces the model's
prediction with the env's own simulator (confidence 1): an ablation that isolates the search
and the model's rewards from the model's skill at predicting states.

Everything the model is asked is counted (`Budget`): scoring requests, generation requests,
prompt and generated tokens, so RAP and CoT are compared at a stated compute budget.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from agentic_rl.algos.mcts import rap_reward
from agentic_rl.envs.discrete import parse_action
from agentic_rl.model.load import token_logprobs
from agentic_rl.model.tokens import encode_text
from agentic_rl.rollout.mcts import MCTS, MCTSConfig
from agentic_rl.types import SamplingParams


class TextDomain(Protocol):
    """What a planner needs from an env whose states can be written and read as text."""

    planning_intro: str
    planning_example: tuple[str, str, str, str]  # state, goal, good action, next state

    def plan_root(self) -> str: ...

    def plan_goal(self) -> str: ...

    def plan_parse(self, text: str) -> str: ...

    def plan_actions(self, state: str) -> list[str]: ...

    def plan_progress(self, state: str) -> tuple[float, bool]: ...

    def plan_transition(self, state: str, action: str) -> str: ...


def is_text_domain(env: Any) -> bool:
    names = ("plan_root", "plan_goal", "plan_parse", "plan_actions", "plan_progress")
    return all(callable(getattr(env, n, None)) for n in names)


@dataclass
class Budget:
    """The compute a planner spent: model requests and tokens."""

    score_requests: int = 0  # continuations scored (one per row of a teacher-forced batch)
    generate_requests: int = 0
    prompt_tokens: int = 0  # tokens read: scored rows and generation prompts
    generated_tokens: int = 0

    @property
    def calls(self) -> int:
        return self.score_requests + self.generate_requests

    def as_dict(self) -> dict[str, float]:
        return {
            "model_calls": float(self.calls),
            "score_requests": float(self.score_requests),
            "generate_requests": float(self.generate_requests),
            "prompt_tokens": float(self.prompt_tokens),
            "generated_tokens": float(self.generated_tokens),
        }


class LMScorer:
    """The policy model asked in plain text: teacher-forced continuation logprobs (rows that
    share a prompt run it once, `share_prefix`) and greedy generation through the generator."""

    def __init__(self, model: Any, tokenizer: Any, generator: Any, chunk_size: int = 64) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.generator = generator
        self.chunk_size = chunk_size
        self.budget = Budget()

    @torch.no_grad()
    def continuation_logprobs(self, prefix: str, tails: list[tuple[str, str]]) -> list[float]:
        """For each (context, scored) in `tails`: log p(scored | prefix + context), summed over
        the tokens of `scored`. Each piece is tokenised on its own and the ids concatenated,
        so every row shares the prefix's ids exactly."""
        if not tails:
            return []
        head = encode_text(self.tokenizer, prefix)
        rows, masks = [], []
        for context, scored in tails:
            ctx, sc = encode_text(self.tokenizer, context), encode_text(self.tokenizer, scored)
            rows.append(head + ctx + sc)
            masks.append([0] * (len(head) + len(ctx)) + [1] * len(sc))
        width = max(len(r) for r in rows)
        pad = self.tokenizer.pad_token_id or 0
        device = next(self.model.parameters()).device
        ids = torch.tensor([r + [pad] * (width - len(r)) for r in rows], device=device)
        attention = torch.tensor(
            [[1] * len(r) + [0] * (width - len(r)) for r in rows], device=device
        )
        wanted = torch.tensor([m + [0] * (width - len(m)) for m in masks], device=device)
        was_training = self.model.training
        self.model.eval()
        logprobs, _, _ = token_logprobs(
            self.model, ids, attention, self.chunk_size, positions=wanted > 0, share_prefix=True
        )
        self.model.train(was_training)
        self.budget.score_requests += len(rows)
        self.budget.prompt_tokens += sum(len(r) for r in rows)
        return [float(v) for v in (logprobs.float() * wanted).sum(-1).tolist()]

    def generate(self, prompt: str, max_new_tokens: int, stop: list[str]) -> tuple[str, float]:
        """Greedy continuation of `prompt` (up to a stop string) and its mean token logprob."""
        ids = encode_text(self.tokenizer, prompt)
        params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0, stop=stop)
        completion = self.generator.generate([ids], [params])[0]
        self.budget.generate_requests += 1
        self.budget.prompt_tokens += len(ids)
        self.budget.generated_tokens += len(completion.token_ids)
        text = self.tokenizer.decode(completion.token_ids, skip_special_tokens=True)
        for s in stop:
            text = text.split(s)[0]
        lp = completion.logprobs
        return text, (sum(lp) / len(lp) if lp else -math.inf)


# ---------------------------------------------------------------------------------------------
# Prompts (plain text, one-shot from the domain's example)
# ---------------------------------------------------------------------------------------------


def policy_prompt(domain: TextDomain, state: str, goal: str) -> str:
    """The planning prompt whose continuation is the next action."""
    s, g, a, _ = domain.planning_example
    return (
        f"{domain.planning_intro}\n\n[STATEMENT]\nI have that, {s}.\nMy goal is to have that "
        f"{g}.\n[NEXT ACTION]\n{a}\n\n[STATEMENT]\nI have that, {state}.\nMy goal is to have "
        f"that {goal}.\n[NEXT ACTION]\n"
    )


def world_model_prompt(domain: TextDomain, state: str, action: str) -> str:
    """The world-model prompt: state + action -> the next state, continued after "I have that,"."""
    s, _, a, nxt = domain.planning_example
    return (
        f"{domain.planning_intro}\n\n[STATE]\nI have that, {s}.\n[ACTION]\n{a}\n[NEXT STATE]\n"
        f"I have that, {nxt}.\n\n[STATE]\nI have that, {state}.\n[ACTION]\n{action}\n"
        "[NEXT STATE]\nI have that,"
    )


def eval_prompt(domain: TextDomain, state: str, goal: str) -> str:
    """The self-evaluation prompt up to the action (then "Is this action good? Answer:")."""
    s, g, a, _ = domain.planning_example
    return (
        f"{domain.planning_intro}\n\n[STATEMENT]\nI have that, {s}.\nMy goal is to have that "
        f"{g}.\n[ACTION]\n{a}\nIs this action good for the goal? Answer: good\n\n[STATEMENT]\n"
        f"I have that, {state}.\nMy goal is to have that {goal}.\n[ACTION]\n"
    )


EVAL_QUESTION = "\nIs this action good for the goal? Answer:"


def cot_prompt(domain: TextDomain, state: str, goal: str) -> str:
    """Chain of thought: the whole plan, one action per line, ending with [PLAN END]."""
    s, g, a, _ = domain.planning_example
    return (
        f"{domain.planning_intro}\n\n[STATEMENT]\nI have that, {s}.\nMy goal is to have that "
        f"{g}.\nMy plan is as follows:\n[PLAN]\n{a}\nstack the red block on top of the blue "
        f"block\n[PLAN END]\n\n[STATEMENT]\nI have that, {state}.\nMy goal is to have that "
        f"{goal}.\nMy plan is as follows:\n[PLAN]\n"
    )


# ---------------------------------------------------------------------------------------------
# RAP as a search problem
# ---------------------------------------------------------------------------------------------


@dataclass
class RAPConfig:
    """RAP's reward and world-model settings (see `algos.mcts.rap_reward`)."""

    alpha: float = 0.5
    goal_reward: float = 100.0
    world_model: str = "llm"  # llm | exact
    max_state_tokens: int = 80
    search: MCTSConfig = field(default_factory=MCTSConfig)


class RAPProblem:
    """`SearchProblem` over a `TextDomain` with the model as world model and evaluator.

    States are canonical state texts (`plan_parse` of what the world model wrote), so equal
    predictions are equal states; a prediction with no recognisable fact is a dead end."""

    def __init__(self, domain: TextDomain, scorer: LMScorer, cfg: RAPConfig) -> None:
        if cfg.world_model not in ("llm", "exact"):
            raise ValueError(f"world_model must be 'llm' or 'exact', got {cfg.world_model!r}")
        self.domain = domain
        self.scorer = scorer
        self.cfg = cfg
        self.goal = domain.plan_goal()
        self.unparsed_predictions = 0  # world-model outputs with no recognisable fact
        self.predictions = 0  # world-model predictions checked against the env's simulator
        self.correct_predictions = 0

    def init_state(self) -> str:
        return self.domain.plan_root()

    def actions(self, state: str) -> list[str]:
        return self.domain.plan_actions(state) if state else []

    def fast_rewards(self, state: str, actions: list[str]) -> list[tuple[float, dict]]:
        likelihood = self.scorer.continuation_logprobs(
            policy_prompt(self.domain, state, self.goal), [("", a + "\n") for a in actions]
        )
        judged = self.scorer.continuation_logprobs(
            eval_prompt(self.domain, state, self.goal),
            [(a + EVAL_QUESTION, " good") for a in actions],
        )
        return [
            (self.cfg.alpha * (lp + ev), {"action_logprob": lp, "self_eval_logprob": ev})
            for lp, ev in zip(likelihood, judged, strict=True)
        ]

    def step(self, state: str, action: str) -> tuple[str, dict]:
        if self.cfg.world_model == "exact":
            return self.domain.plan_transition(state, action), {"state_confidence": 1.0}
        text, mean_logprob = self.scorer.generate(
            world_model_prompt(self.domain, state, action),
            self.cfg.max_state_tokens,
            stop=["\n", "."],
        )
        parsed = self.domain.plan_parse(text)
        if not parsed:
            self.unparsed_predictions += 1
        exact = getattr(self.domain, "plan_transition", None)
        if exact is not None:  # a diagnostic only: the search never sees the true state
            self.predictions += 1
            self.correct_predictions += int(parsed == exact(state, action))
        return parsed, {"state_confidence": math.exp(mean_logprob)}

    def reward(self, state: str, action: str, next_state: str, details: dict) -> float:
        progress, solved = self.domain.plan_progress(next_state) if next_state else (0.0, False)
        return rap_reward(
            details["action_logprob"],
            details["self_eval_logprob"],
            progress,
            solved,
            details.get("state_confidence", 1.0),
            self.cfg.alpha,
            self.cfg.goal_reward,
        )

    def is_terminal(self, state: str) -> bool:
        return bool(state) and self.domain.plan_progress(state)[1]


def rap_plan(domain: TextDomain, scorer: LMScorer, cfg: RAPConfig) -> tuple[list[str], dict]:
    """RAP's plan for the domain's current state, and search statistics."""
    problem = RAPProblem(domain, scorer, cfg)
    search = MCTS(problem, cfg.search)
    plan = search.search()
    return plan, {
        "unparsed_predictions": float(problem.unparsed_predictions),
        "world_model_predictions": float(problem.predictions),
        "world_model_correct": float(problem.correct_predictions),
    }


def cot_plan(
    domain: TextDomain, scorer: LMScorer, action_names: list[str], max_new_tokens: int = 96
) -> tuple[list[str], dict]:
    """Greedy chain of thought: the model writes the whole plan at once; lines that name no
    action are skipped and counted (`unparsed_lines`)."""
    text, _ = scorer.generate(
        cot_prompt(domain, domain.plan_root(), domain.plan_goal()),
        max_new_tokens,
        stop=["[PLAN END]", "\n\n"],
    )
    plan, unparsed = [], 0
    for line in text.splitlines():
        if not line.strip():
            continue
        index = parse_action(line, action_names)
        if index is None:
            unparsed += 1
        else:
            plan.append(action_names[index])
    return plan, {"unparsed_lines": float(unparsed)}
