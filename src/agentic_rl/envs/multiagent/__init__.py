"""Multi-agent systems: several roles in one episode, exchanging messages through the env (the planner / executor search team, the solver / verifier math team, two debaters)."""

from agentic_rl.types import Message, Observation


def open_conversation(role: str, system: str, user: str) -> Observation:
    """A role's turn opens a fresh conversation (its system prompt and one user message that
    holds all it is shown): each role's trajectory is its own context, never the other's."""
    messages: list[Message] = [
        {"role": "system", "content": system},
        {"role": "user", "content": user},
    ]
    return Observation(messages=messages, role=role)


def role_reward_key(role: str) -> str:
    """The step-info key under which a multi-agent env reports a reward term of `role` alone
    (an `env/` metric, summed over the episode; rollout/roles.py `add_role_rewards` adds it to
    that role's samples' rewards on top of the team's outcome)."""
    return f"env/{role}_reward"
