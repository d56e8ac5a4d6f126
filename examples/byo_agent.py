"""Bring your own agent: a plain OpenAI-client tool loop, trained by reinforcement learning.

`run_episode` below is ordinary agent code: the chat-completions loop with a calculator tool, no
agentic-rl import in it. It talks to the policy behind `agentic-rl serve-policy`, which records
the exact token ids, logprobs and loss masks of every call; the agent reports a reward per
episode, and the recorded episodes feed one GRPO update of the served policy.

    .venv/bin/python examples/byo_agent.py             # tiny random model, in-process, seconds
    .venv/bin/python examples/byo_agent.py --bundled   # SmolLM2-135M-Instruct, about a minute

Against a server started separately (it trains itself every 8 finished episodes):

    agentic-rl serve-policy calculator_grpo --train-every 8 --group-size 4
    .venv/bin/python examples/byo_agent.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import ast
import json
import operator
import random
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "calculator",
            "description": "Evaluate an arithmetic expression with + - * / and parentheses.",
            "parameters": {
                "type": "object",
                "properties": {"expression": {"type": "string"}},
                "required": ["expression"],
            },
        },
    }
]
SYSTEM = "Solve the problem. Call the calculator tool, then reply with the final number only."
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}
_OPS |= {ast.Div: operator.truediv, ast.USub: operator.neg}


def calculator(expression: str) -> str:
    """The agent's own tool: + - * / over numbers, nothing else is evaluated."""

    def value(node: ast.AST) -> float:
        if isinstance(node, ast.Constant) and isinstance(node.value, int | float):
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.left), value(node.right))
        if isinstance(node, ast.UnaryOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](value(node.operand))
        raise ValueError("only numbers and + - * / ( ) are allowed")

    try:
        result = value(ast.parse(expression, mode="eval").body)
    except (SyntaxError, ValueError, ZeroDivisionError) as err:
        return f"error: {err}"
    return str(int(result) if float(result).is_integer() else round(result, 6))


def run_episode(
    client: OpenAI,
    model: str,
    question: str,
    episode_id: str,
    max_turns: int = 3,
    max_tokens: int = 48,
) -> tuple[str, int]:
    """The agent loop: ask, run the tool calls it gets back, until a plain reply. Returns the
    final reply and the number of tool calls."""
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": SYSTEM},
        {"role": "user", "content": question},
    ]
    calls = 0
    for _ in range(max_turns):
        response = client.chat.completions.create(
            model=model,
            messages=messages,
            tools=TOOLS,
            max_tokens=max_tokens,
            temperature=1.0,
            user=episode_id,  # names the episode, so its calls become one trajectory
        )
        message = response.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            return message.content or "", calls
        for call in message.tool_calls:
            calls += 1
            try:
                expression = str(json.loads(call.function.arguments).get("expression", ""))
            except (json.JSONDecodeError, AttributeError):
                expression = ""
            messages.append(
                {"role": "tool", "tool_call_id": call.id, "content": calculator(expression)}
            )
    return "", calls


def reward_of(reply: str, answer: int) -> float:
    """1 for the right number; else up to 0.1 for a short reply (the prompt asks for the number
    only), so even a model that never gets it right sees which replies are better."""
    numbers = re.findall(r"-?\d+", reply)
    if numbers and int(numbers[-1]) == answer:
        return 1.0
    return 0.1 * max(0.0, 1.0 - len(reply) / 400)


def questions(n: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        a, b = rng.randint(11, 99), rng.randint(11, 99)
        out.append((f"What is {a} * {b}?", a * b))
    return out


def collect(
    base_url: str, model: str, num_questions: int, group_size: int, seed: int, max_tokens: int
) -> list[dict[str, Any]]:
    """Run group_size episodes per question at once (the server batches them) and report each
    episode's reward; episodes of a question form one GRPO group."""
    client = OpenAI(base_url=f"{base_url}/v1", api_key="unused")
    jobs = [
        (f"q{seed}-{q}-{k}", f"q{seed}-{q}", question, answer)
        for q, (question, answer) in enumerate(questions(num_questions, seed))
        for k in range(group_size)
    ]

    def play(job: tuple[str, str, str, int]) -> dict[str, Any]:
        episode_id, group, question, answer = job
        reply, calls = run_episode(client, model, question, episode_id, max_tokens=max_tokens)
        reward = reward_of(reply, answer)
        report = {"reward": reward, "group_id": group, "success": float(reward == 1.0)}
        httpx.post(f"{base_url}/v1/episodes/{episode_id}/reward", json=report).raise_for_status()
        return {"episode_id": episode_id, "reward": reward, "tool_calls": calls, "reply": reply}

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(play, jobs))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundled", action="store_true", help="SmolLM2-135M instead of tiny")
    parser.add_argument("--url", help="a running serve-policy server (default: start one here)")
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=48, help="new tokens per call")
    parser.add_argument("--out", default="/tmp/agentic-rl-byo", help="episodes JSONL folder")
    args = parser.parse_args(argv)
    if args.url:
        episodes = collect(
            args.url, "policy", args.questions, args.group_size, args.seed, args.max_tokens
        )
        return {"episodes": episodes}

    # In-process: the same service `agentic-rl serve-policy` runs, plus one update here.
    from agentic_rl.config.load import load_config
    from agentic_rl.retrieval.server import BackgroundServer
    from agentic_rl.serving.policy_server import PolicyService, create_app
    from agentic_rl.train.setup import build

    model = "smollm2-135m" if args.bundled else "tiny"
    overrides = [f"model.name={model}", f"trainer.out_dir={args.out}", "optim.lr=1e-4"]
    setup = build(load_config("calculator_grpo", overrides))
    service = PolicyService.from_setup(
        setup, export=f"{args.out}/episodes.jsonl", group_size=args.group_size
    )
    with BackgroundServer(create_app(service)) as server:
        episodes = collect(
            server.url, model, args.questions, args.group_size, args.seed, args.max_tokens
        )
    for ep in episodes:
        print(f"{ep['episode_id']}: reward {ep['reward']:.3f}, {ep['tool_calls']} tool calls")
    finished = service.take_finished()
    update = service.train(finished)
    print(
        f"GRPO update on {len(finished)} episodes: loss {update.get('loss', 0.0):.4f}, "
        f"grad norm {update.get('grad_norm', 0.0):.3f}, skipped {bool(update['skipped_update'])}, "
        f"policy version {service.policy_version}; episodes in {args.out}/episodes.jsonl"
    )
    return {"episodes": episodes, "update": update, "policy_version": service.policy_version}


if __name__ == "__main__":
    main()
