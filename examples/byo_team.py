"""Bring your own multi-agent system: two agents in plain OpenAI-client code, trained as a team.

`play_team` below is ordinary multi-agent code with no agentic-rl import in it: a solver answers
an arithmetic question, a verifier reads the question and the proposal and accepts or rejects
it. Both talk to one `agentic-rl serve-policy` endpoint serving a team (the solver_verifier
recipe, a LoRA adapter per role): the request's `model` names the role, so each agent is sampled
with its own policy, and each agent's conversation is recorded as an episode of its own. The
system reports a reward per agent (the team's outcome for the solver; the outcome plus a
correct verdict for the verifier), and one GRPO update trains each role's adapter on its own
episodes only. `--train-roles verifier` optimises the verifier alone inside the fixed system:
the solver keeps acting with its policy, its episodes are recorded with loss mask 0.

    .venv/bin/python examples/byo_team.py                           # tiny model, in-process
    .venv/bin/python examples/byo_team.py --train-roles verifier    # train one agent only
    .venv/bin/python examples/byo_team.py --bundled                 # SmolLM2-135M adapters

Against a team served separately (e.g. an exported team, docs/guides/serve-policy.md):

    agentic-rl serve-policy solver_verifier --train-every 8 --group-size 4
    .venv/bin/python examples/byo_team.py --url http://127.0.0.1:8000
"""

from __future__ import annotations

import argparse
import random
import re
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
from openai import OpenAI

SOLVER = "Answer the question with a number: <answer>n</answer>."
VERIFIER = (
    "Check the proposed answer. Reply <verdict>accept</verdict> or <verdict>reject</verdict>."
)


def ask(client: OpenAI, role: str, system: str, user: str, episode_id: str, tokens: int) -> str:
    """One call as `role` (the team server samples it with that role's own policy)."""
    response = client.chat.completions.create(
        model=role,
        messages=[{"role": "system", "content": system}, {"role": "user", "content": user}],
        max_tokens=tokens,
        temperature=1.0,
        extra_headers={"X-Episode-Id": episode_id},  # this agent's conversation, one episode
    )
    return response.choices[0].message.content or ""


def brevity(text: str) -> float:
    """Up to 0.1 for a short reply (each prompt asks for one tag), so even an untrained model
    sees which of its replies are better."""
    return 0.1 * max(0.0, 1.0 - len(text) / 200)


def play_team(client: OpenAI, question: str, answer: int, tag: str, tokens: int) -> dict[str, Any]:
    """The system: the solver proposes, the verifier judges. Returns each agent's reward."""
    reply = ask(client, "solver", SOLVER, question, f"{tag}-solver", tokens)
    found = re.findall(r"-?\d+", reply)
    proposal = int(found[-1]) if found else None
    check = f"{question}\nProposed answer: {proposal if proposal is not None else reply!r}"
    verdict = ask(client, "verifier", VERIFIER, check, f"{tag}-verifier", tokens)
    accepted = "accept" in verdict.lower() and "reject" not in verdict.lower()
    correct = proposal == answer
    outcome = float(correct and accepted)  # the team's outcome: a right answer let through
    return {
        "solver": outcome + brevity(reply),
        "verifier": outcome + 0.5 * float(accepted == correct) + brevity(verdict),  # its own term
        "proposal": proposal,
        "accepted": accepted,
    }


def questions(n: int, seed: int) -> list[tuple[str, int]]:
    rng = random.Random(seed)
    pairs = [(rng.randint(2, 9), rng.randint(2, 9)) for _ in range(n)]
    return [(f"What is {a} + {b}?", a + b) for a, b in pairs]


def collect(url: str, num_questions: int, group_size: int, seed: int, tokens: int) -> list[dict]:
    """group_size plays of each question at once (the server batches each role's calls); each
    agent's episode is rewarded, grouped per question (a role's group: its GRPO group)."""
    client = OpenAI(base_url=f"{url}/v1", api_key="unused")
    jobs = [
        (f"q{q}-{k}", f"q{q}", question, answer)
        for q, (question, answer) in enumerate(questions(num_questions, seed))
        for k in range(group_size)
    ]

    def play(job: tuple[str, str, str, int]) -> dict[str, Any]:
        tag, group, question, answer = job
        result = play_team(client, question, answer, tag, tokens)
        for role in ("solver", "verifier"):
            report = {"reward": result[role], "group_id": f"{group}-{role}"}
            done = httpx.post(f"{url}/v1/episodes/{tag}-{role}/reward", json=report, timeout=60)
            done.raise_for_status()
        return {"tag": tag, **result}

    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return list(pool.map(play, jobs))


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--bundled", action="store_true", help="SmolLM2-135M instead of tiny")
    parser.add_argument("--url", help="a running team server (default: start one here)")
    parser.add_argument("--train-roles", nargs="*", default=[], help="default: every role")
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-tokens", type=int, default=16, help="new tokens per call")
    args = parser.parse_args(argv)
    if args.url:
        plays = collect(args.url, args.questions, args.group_size, args.seed, args.max_tokens)
        return {"plays": plays}

    # In-process: the team `agentic-rl serve-policy solver_verifier` serves, plus one update.
    import torch

    from agentic_rl.config.load import load_config
    from agentic_rl.model.roles import as_role
    from agentic_rl.retrieval.server import BackgroundServer
    from agentic_rl.serving.policy_server import PolicyService, create_app
    from agentic_rl.train.setup import build

    overrides = [
        f"model.name={'smollm2-135m' if args.bundled else 'tiny'}",
        "model.role_policies=adapters",
        "model.lora_rank=8",
        "optim.lr=1e-3",
        f"rollout.train_roles=[{','.join(args.train_roles)}]",
    ]
    setup = build(load_config("solver_verifier", overrides))
    service = PolicyService.from_setup(setup, group_size=args.group_size)
    print(f"serving a team of roles {', '.join(service.roles)} (request 'model' = the role)")
    with BackgroundServer(create_app(service)) as server:
        plays = collect(server.url, args.questions, args.group_size, args.seed, args.max_tokens)
    for play in plays:
        print(
            f"{play['tag']}: solver proposed {play['proposal']}, verifier "
            f"{'accepted' if play['accepted'] else 'rejected'}; rewards solver "
            f"{play['solver']:.3f}, verifier {play['verifier']:.3f}"
        )

    def weights(role: str) -> list[torch.Tensor]:
        with as_role(setup.policy, role) as module:
            return [p.detach().clone() for n, p in module.named_parameters() if f".{role}." in n]

    before = {role: weights(role) for role in service.roles}
    finished = service.take_finished()
    update = service.train(finished)
    moved = {
        role: any(not torch.equal(a, b) for a, b in zip(before[role], weights(role), strict=True))
        for role in service.roles
    }
    print(
        f"GRPO update on {len(finished)} episodes (both roles), skipped "
        f"{bool(update['skipped_update'])}; adapter moved: "
        + ", ".join(f"{role} {'yes' if moved[role] else 'no'}" for role in service.roles)
    )
    return {"plays": plays, "update": update, "moved": moved}


if __name__ == "__main__":
    main()
