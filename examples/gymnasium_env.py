"""Any Gymnasium env with a text rendering and discrete actions, through the gym_text adapter:
what the model reads, the actions it may write and when an episode counts as a success.

    python examples/gymnasium_env.py
    agentic-rl check-env gym_text env.options.env_id=Taxi-v4   # Taxi-v3 on older Gymnasium
"""

from __future__ import annotations

from agentic_rl.envs.check import check_env
from agentic_rl.envs.games.gym_text import GymTextEnv, GymTextError, make_gym_text_tasks
from agentic_rl.types import Action


def main() -> None:
    import gymnasium

    taxi = next(i for i in ("Taxi-v4", "Taxi-v3") if i in gymnasium.registry)
    env = GymTextEnv(taxi)
    [task] = make_gym_text_tasks("eval", 1, env_id=taxi)
    first = env.reset(task, seed=0)
    print(first.messages[0]["content"])  # the system prompt: actions and how to write them
    print(first.messages[-1]["content"])  # the state: the colours' meanings kept as words
    print(check_env(env, make_gym_text_tasks("eval", 3, env_id=taxi)))

    cliff = GymTextEnv("CliffWalking-v1")  # success_when="auto": terminated for CliffWalking
    [task] = make_gym_text_tasks("train", 1, env_id="CliffWalking-v1")
    cliff.reset(task, seed=0)
    for moves in ("Up || Right || Right || Right || Right", "Right || " * 4 + "Right",
                  "Right || Right || Down"):  # fmt: skip
        result = cliff.step(Action(kind="tool", name="action", arguments={"actions": moves}))
    print(f"CliffWalking: success {result.info['success']}, last reward {result.reward}")

    try:
        GymTextEnv("CartPole-v1")
    except GymTextError as err:
        print(f"refused: {err}")


if __name__ == "__main__":
    main()
