"""Open episodes of a multi-agent round for the role-policy tests (tests/model/): one prompt,
each episode's open conversation of the given role."""

from __future__ import annotations

from typing import Any

from agentic_rl.rollout.episode import Episode


def role_episodes(tokenizer: Any, roles: list[str] | tuple[str, ...]) -> list[Episode]:
    """An episode per role in `roles` (repeats allowed), each at the prompt "question: 2 + 3 =",
    in group "g", with no env: what a role actor's round receives."""
    prompt = tokenizer("question: 2 + 3 =")["input_ids"]
    return [
        Episode(
            env=None,
            task=None,
            group_id="g",
            token_ids=list(prompt),
            prompt_length=len(prompt),
            role=role,
        )
        for role in roles
    ]
