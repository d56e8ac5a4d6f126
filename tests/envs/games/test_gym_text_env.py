import pytest

pytest.importorskip("gymnasium")

from agentic_rl.envs.check import check_env  # noqa: E402
from agentic_rl.envs.games.gym_text import (  # noqa: E402
    ACTION_NAMES,
    COLOUR_MEANINGS,
    FrozenLakeEnv,
    GymTextEnv,
    GymTextError,
    ansi_to_text,
    lake_distances,
    lake_path,
    make_frozenlake_tasks,
    make_gym_text_tasks,
    render_lake,
)
from agentic_rl.envs.registry import ENVS, TASKS, make_env  # noqa: E402
from agentic_rl.types import Action, Task  # noqa: E402

STANDARD = ["SFFF", "FHFH", "FFFH", "HFFG"]  # Gymnasium's 4x4 map


def act(text):
    return Action(kind="tool", name="action", arguments={"actions": text})


def lake_task(desc=STANDARD, env_seed=7):
    return Task(
        task_id="lake", prompt="", answers=[""], fields={"desc": desc, "env_seed": env_seed}
    )


def test_registered_and_pass_check_env():
    assert ENVS["frozenlake"] is FrozenLakeEnv and TASKS["frozenlake"] is make_frozenlake_tasks
    assert ENVS["gym_text"] is GymTextEnv and TASKS["gym_text"] is make_gym_text_tasks
    tasks = make_frozenlake_tasks("eval", 20, seed=1)
    assert check_env(make_env("frozenlake"), tasks) == []
    assert check_env(make_env("frozenlake", is_slippery=False), tasks) == []
    # the generic adapter has no expert: check_env says it skipped that check
    skipped = check_env(make_env("gym_text"), make_gym_text_tasks("eval", 5, seed=1))
    assert skipped == ["expert succeeds (the env has no expert_turn)"]


def test_ansi_rendering_becomes_plain_text():
    assert ansi_to_text("\n\x1b[41mS\x1b[0mFFF\nFHFH\n\n") == "[S]FFF\nFHFH"
    assert ansi_to_text("  (Down)\nS\x1b[41mF\x1b[0mFF\n") == "  (Down)\nS[F]FF"
    # any other colour keeps its meaning (or its name): Taxi's taxi and passenger
    assert ansi_to_text("|\x1b[43m \x1b[0m| \x1b[34;1mR\x1b[0m|") == "|[ :on yellow]| [R:blue]|"
    taxi = COLOUR_MEANINGS["Taxi"]
    assert (
        ansi_to_text("|\x1b[43m \x1b[0m| \x1b[34;1mR\x1b[0m|", taxi) == "|[ :taxi]| [R:passenger]|"
    )
    nested = "|\x1b[35m\x1b[34;1m\x1b[43mR\x1b[0m\x1b[0m\x1b[0m: |\x1b[42mG\x1b[0m|"
    assert (
        ansi_to_text(nested, taxi) == "|[R:destination+passenger+taxi]: |[G:taxi with passenger]|"
    )


def test_generic_adapter_passes_reward_and_termination_through():
    env = GymTextEnv("FrozenLake-v1", env_kwargs={"is_slippery": False})
    assert env.action_names == ["Left", "Down", "Right", "Up"]
    [task] = make_gym_text_tasks("train", 1, env_id="FrozenLake-v1")
    first = env.reset(task, seed=0)
    assert first.messages[-1]["content"] == "[S]FFF\nFHFH\nFFFH\nHFFG" == first.anchor
    assert "Left (0), Down (1), Right (2), Up (3)" in first.messages[0]["content"]
    step = env.step(act("down || 1 || right"))  # by name or by Gymnasium's index
    assert step.reward == 0.0 and not step.terminated and step.info["actions"] == 3
    assert step.observation.content == "  (Right)\nSFFF\nFHFH\nF[F]FH\nHFFG"
    assert step.observation.anchor == "SFFF\nFHFH\nF[F]FH\nHFFG"  # the state, not the last move
    goal = env.step(act("Right || Down || Right"))
    assert goal.reward == 1.0 and goal.terminated and goal.info["success"] == 1.0
    env.reset(task, seed=0)
    hole = env.step(act("Right || Down || Down"))  # (1, 1) is a hole: the episode ends there
    assert (
        hole.terminated
        and hole.reward == 0.0
        and hole.info
        == {
            "tool_call": 1,
            "actions": 2,
            "success": 0.0,
        }
    )


def test_the_envs_own_time_limit_truncates():
    env = GymTextEnv("FrozenLake-v1", env_kwargs={"is_slippery": False, "max_episode_steps": 2})
    env.reset(make_gym_text_tasks("train", 1)[0], seed=0)
    result = env.step(act("Left || Left || Left"))
    assert result.truncated and not result.terminated and result.info["actions"] == 2


def test_envs_without_text_rendering_or_discrete_actions_are_refused():
    with pytest.raises(GymTextError, match="'CartPole-v1' has no text rendering.*'rgb_array'"):
        GymTextEnv("CartPole-v1")
    with pytest.raises(GymTextError, match="'NoSuchEnv-v0'"):
        GymTextEnv("NoSuchEnv-v0")
    with pytest.raises(GymTextError, match="has 4 actions but 2 action names"):
        GymTextEnv("FrozenLake-v1", action_names=["a", "b"])
    with pytest.raises(GymTextError, match="no text rendering"):
        make_gym_text_tasks("train", 1, env_id="Acrobot-v1")


def test_other_text_envs_work_through_the_same_adapter():
    env = GymTextEnv("CliffWalking-v1")
    [task] = make_gym_text_tasks("train", 1, env_id="CliffWalking-v1")
    env.reset(task, seed=0)
    fell = env.step(act("Right"))  # off the start, into the cliff: -100, back to the start
    assert fell.reward == -100.0 and not fell.terminated
    custom = GymTextEnv("FrozenLake-v1", action_names=["W", "S", "E", "N"])
    custom.reset(make_gym_text_tasks("train", 1)[0], seed=0)
    assert custom.step(act("E")).info["actions"] == 1


def test_group_seed_drives_the_slippery_transitions():
    tasks = make_gym_text_tasks("train", 1)
    outcomes = set()
    for seed in range(12):
        a, b = GymTextEnv(), GymTextEnv()
        obs_a = a.reset(tasks[0], seed=seed)
        obs_b = b.reset(tasks[0], seed=seed)
        assert obs_a == obs_b  # the task fixes the start
        ra, rb = a.step(act("Right || Right")), b.step(act("Right || Right"))
        assert ra.observation == rb.observation  # same seed, same actions: same episode
        outcomes.add(ra.observation.anchor)
    assert len(outcomes) > 1  # slippery: the reset seed changes where Right leads
    train, evals = make_gym_text_tasks("train", 50), make_gym_text_tasks("eval", 50)
    seeds = lambda ts: {t.fields["env_seed"] for t in ts}  # noqa: E731
    assert not seeds(train) & seeds(evals)


def test_frozenlake_renders_as_ragen():
    assert render_lake(STANDARD, (0, 0)) == "P___\n_O_O\n___O\nO__G"
    assert render_lake(STANDARD, (1, 1)) == "____\n_X_O\n___O\nO__G"  # in a hole
    assert render_lake(STANDARD, (3, 3)) == "____\n_O_O\n___O\nO__√"  # on the goal
    env = FrozenLakeEnv(is_slippery=False)
    first = env.reset(lake_task(), seed=0)
    assert first.messages[-1]["content"] == "P___\n_O_O\n___O\nO__G" == first.anchor
    assert "P player, _ frozen ice, O hole, G goal" in first.messages[0]["content"]
    result = env.step(act("Down || Down || Right || Right || Down"))
    assert result.observation.content == "____\n_O_O\n___O\nO_PG" and result.reward == 0.0
    done = env.step(act("Right"))
    assert done.terminated and done.reward == 1.0 and done.info["success"] == 1.0
    assert done.observation.content == "____\n_O_O\n___O\nO__√"


def test_frozenlake_maps_are_random_solvable_and_split():
    train = make_frozenlake_tasks("train", 300, seed=0)
    assert [t.fields for t in train] == [t.fields for t in make_frozenlake_tasks("train", 300)]
    evals = make_frozenlake_tasks("eval", 60, seed=0)
    key = lambda t: "/".join(t.fields["desc"])  # noqa: E731
    assert len({key(t) for t in train}) == 300 and not {key(t) for t in train} & {
        key(t) for t in evals
    }
    starts = set()
    for task in train:
        desc = task.fields["desc"]
        assert sum(row.count("S") for row in desc) == sum(row.count("G") for row in desc) == 1
        start = next((r, row.index("S")) for r, row in enumerate(desc) if "S" in row)
        starts.add(start)
        assert len(task.answers[0].split()) == len(lake_path(desc)) == lake_distances(desc)[start]
        assert task.prompt == render_lake(desc, start)
    assert len(starts) > 8  # random starts, as RAGEN's generator
    assert lake_path(STANDARD) == [1, 1, 2, 1, 2, 2]  # Down Down Right Down Right Right


def test_slippery_lake_slips_and_the_oracle_expert_still_succeeds():
    tasks = make_frozenlake_tasks("train", 30, seed=4)
    slipped = 0
    for task in tasks:
        for seed in range(3):
            env = FrozenLakeEnv(is_slippery=True, max_actions_per_turn=1, max_steps=30)
            env.reset(task, seed)
            while not env.done:
                text = env.expert_turn()
                before = env.position
                intended = text.removeprefix("<action>").removesuffix("</action>")
                result = env.step(act(intended))
                delta = {"Left": (0, -1), "Down": (1, 0), "Right": (0, 1), "Up": (-1, 0)}
                dr, dc = delta[intended]
                slipped += env.position != (before[0] + dr, before[1] + dc)
            assert result.info["success"] == 1.0 and result.reward == 1.0
    assert slipped > 0  # the oracle often has to aim sideways on slippery ice


def test_success_rate_one_is_deterministic():
    env = FrozenLakeEnv(is_slippery=True, success_rate=1.0)
    for seed in range(5):
        env.reset(lake_task(), seed=seed)
        assert env.step(act("Down")).observation.content.split("\n")[1] == "PO_O"


def _gym_id(base):
    """The registered id (newest version) of a Gymnasium env named without its version."""
    import gymnasium

    ids = [k for k in gymnasium.registry if k.split("/")[-1].split("-v")[0] == base]
    return sorted(k for k in ids if "/" not in k)[-1]


@pytest.mark.parametrize("base", sorted(ACTION_NAMES))
def test_distinct_states_never_share_a_text(base):
    """Every state of every env the adapter names reads differently: the text keeps what the
    picture means (Taxi's passenger and destination colours, its empty or full taxi)."""
    env = GymTextEnv(_gym_id(base))
    env.gym.reset(seed=0)
    world = env.gym.unwrapped
    texts: dict[str, int] = {}
    for state in range(int(world.observation_space.n)):
        world.s, world.lastaction = state, None
        text = ansi_to_text(env.gym.render(), env.colour_meanings)
        assert text not in texts, f"{base}: states {texts.get(text)} and {state} read:\n{text}"
        texts[text] = state


def test_taxi_shows_the_passenger_and_the_destination():
    env = GymTextEnv(_gym_id("Taxi"))
    [task] = make_gym_text_tasks("eval", 1, env_id=_gym_id("Taxi"))
    state = env.reset(task, seed=0).messages[-1]["content"]
    assert "[ :taxi]" in state or ":taxi]" in state
    assert state.count(":passenger]") == 1 and state.count(":destination]") == 1
    assert state == task.prompt
    assert "[text:what its colour means]" in env.system_prompt()


def test_cliffwalking_goal_counts_as_success():
    """CliffWalking pays -1 for the goal step like any other: by the documented rule
    (success_when="auto" -> "terminated" for it) reaching the goal is a success."""
    env = GymTextEnv(_gym_id("CliffWalking"))
    assert env.success_when == "terminated"
    [task] = make_gym_text_tasks("train", 1, env_id=_gym_id("CliffWalking"))
    env.reset(task, seed=0)
    results = [
        env.step(act(moves))
        for moves in (
            "Up || Right || Right || Right || Right",
            "Right || Right || Right || Right || Right",
            "Right || Right || Down",
        )
    ]
    assert [r.terminated for r in results] == [False, False, True]
    assert results[-1].reward == -3.0 and results[-1].info["success"] == 1.0
    assert GymTextEnv(_gym_id("FrozenLake")).success_when == "reward"
    with pytest.raises(ValueError, match="success_when must be one of auto, reward, terminated"):
        GymTextEnv(_gym_id("FrozenLake"), success_when="goal")
