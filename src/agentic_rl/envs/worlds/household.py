"""ALFWorld-like household tasks: pick-and-place games generated offline with TextWorld.

ALFWorld's games come from ALFRED's PDDL, which is not on the package registry; this env is the
offline stand-in RECIPES.md names: TextWorld (`textworld` from PyPI, extra
`agentic-rl[household]`) generates and compiles each game with its own generator
(`textworld.GameMaker`, compiled by its bundled Inform 7) and runs it with its own engine.

A task is a small house (`num_rooms` rooms in a row, each with two or three pieces of
furniture: containers such as a fridge, which may start closed, and supporters such as a
table) with a few portable objects, and an ALFWorld pick-and-place goal, "put the apple in the
fridge" / "put the mug on the desk". The task generator only draws the layout (seeded,
pure Python, train and eval disjoint by a hash); the game itself is compiled the first time an
episode needs it and cached under `cache_dir` (default `~/.cache/agentic_rl/household`), keyed
by a hash of the layout, so the same seed always gives the same games.

The agent writes TextWorld commands in `<action>...</action>` (several separated by `||`, each
executed, as RAGEN does; see envs/discrete.py); a command must be one of the admissible
commands listed in the observation (TextWorld's `admissible_commands`, without the
`examine` / `look` / `inventory` commands that only re-describe what the observation already
shows), else it is invalid (format penalty, no effect), as in verl-agent's ALFWorld. The
observation is compact: the game's reply to the last command, the room and what is visible in
it (rendered from the game's facts), what the agent carries, and the admissible commands.
Reward: `success_reward` when TextWorld reports the game won (the goal fact holds), then the
episode ends (success 1); after `max_steps` executed commands it is truncated.

The scripted expert is TextWorld's own: the game's walkthrough, re-planned from the current
state by the engine (`policy_commands`) whenever the agent strays. Observations carry `anchor`
= the game state's facts (a sorted tuple of strings), which GiGPO groups steps on.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import random
import re
import tempfile
import warnings
from collections.abc import Hashable
from pathlib import Path
from typing import Any, Literal

from agentic_rl.envs.discrete import ACTION_SEP, DiscreteActionEnv
from agentic_rl.types import Task

Split = Literal["train", "eval"]
EVAL_BUCKETS = 5  # 1 in 5 layouts is reserved for eval

# furniture per room: (name, "c" container | "s" supporter); names are single words so the
# game's parser never has to disambiguate
ROOMS: dict[str, tuple[tuple[str, str], ...]] = {
    "kitchen": (("fridge", "c"), ("cabinet", "c"), ("countertop", "s"), ("microwave", "c")),
    "living room": (("sofa", "s"), ("shelf", "s"), ("drawer", "c"), ("armchair", "s")),
    "bedroom": (("bed", "s"), ("dresser", "c"), ("desk", "s"), ("wardrobe", "c")),
    "bathroom": (("sink", "s"), ("bathtub", "c"), ("basket", "c"), ("stool", "s")),
}
OBJECTS = (
    "apple", "tomato", "bread", "mug", "plate", "bowl", "spoon", "fork", "book", "pen",
    "remote", "pillow", "candle", "towel", "soap", "cellphone", "watch", "vase", "laptop",
    "lettuce", "egg", "cup", "pencil", "keychain",
)  # fmt: skip
OPPOSITE = {"east": "west", "west": "east", "north": "south", "south": "north"}
HIDDEN_VERBS = ("examine", "look", "inventory")

SYSTEM_PROMPT = (
    "You are in a house and must complete a household task. Each turn, write up to {k} "
    "commands from the list of admissible commands, separated by ||, like "
    "<action>go east || open fridge</action>. Containers must be open before you take "
    "something from them or put something in them; use 'insert X into Y' for containers and "
    "'put X on Y' for surfaces."
)


class HouseholdError(RuntimeError):
    """TextWorld is missing or a game could not be compiled; the message says how to fix it."""


def _textworld() -> Any:
    try:
        import textworld
    except ImportError:
        raise HouseholdError(
            "the household env needs TextWorld: pip install 'agentic-rl[household]'"
        ) from None
    return textworld


# ---------------------------------------------------------------------------------------------
# Layouts (pure Python, seeded) and their walkthroughs
# ---------------------------------------------------------------------------------------------


def draw_layout(rng: random.Random, num_rooms: int = 2, num_objects: int = 3) -> dict[str, Any]:
    """One house: rooms in a row joined by exits, furniture, objects and a pick-and-place goal.

    Returns a JSON-able spec: `rooms` (names), `exits` (direction from room i to room i + 1),
    `start` (the player's room), `furniture` (name, kind, room, closed), `objects` (name,
    index of the furniture holding it) and `goal` (object name, index of the target)."""
    if not 1 <= num_rooms <= len(ROOMS):
        raise ValueError(f"num_rooms must be 1-{len(ROOMS)}, got {num_rooms}")
    if num_objects < 1:
        raise ValueError(f"num_objects must be >= 1, got {num_objects}")
    rooms = rng.sample(sorted(ROOMS), num_rooms)
    exits: list[str] = []
    for _ in range(num_rooms - 1):
        back = OPPOSITE[exits[-1]] if exits else ""
        exits.append(rng.choice([d for d in OPPOSITE if d != back]))
    furniture = []
    for r, room in enumerate(rooms):
        for name, kind in rng.sample(ROOMS[room], rng.randint(2, 3)):
            closed = kind == "c" and rng.random() < 0.7
            furniture.append({"name": name, "kind": kind, "room": r, "closed": closed})
    objects = [
        {"name": name, "on": rng.randrange(len(furniture))}
        for name in rng.sample(OBJECTS, num_objects)
    ]
    goal_object = rng.randrange(num_objects)
    targets = [i for i in range(len(furniture)) if i != objects[goal_object]["on"]]
    return {
        "rooms": rooms,
        "exits": exits,
        "start": rng.randrange(num_rooms),
        "furniture": furniture,
        "objects": objects,
        "goal": {"object": objects[goal_object]["name"], "target": rng.choice(targets)},
    }


def _path(layout: dict[str, Any], start: int, end: int) -> list[str]:
    """The `go` commands from room `start` to room `end` (rooms are in a row)."""
    exits = layout["exits"]
    if end >= start:
        return [f"go {exits[i]}" for i in range(start, end)]
    return [f"go {OPPOSITE[exits[i]]}" for i in range(start - 1, end - 1, -1)]


def walkthrough(layout: dict[str, Any]) -> list[str]:
    """A shortest command sequence that solves `layout` (TextWorld's command phrasing)."""
    furniture, goal = layout["furniture"], layout["goal"]
    obj = next(o for o in layout["objects"] if o["name"] == goal["object"])
    source, target = furniture[obj["on"]], furniture[goal["target"]]
    name = obj["name"]
    commands = _path(layout, layout["start"], source["room"])
    if source["closed"]:
        commands.append(f"open {source['name']}")
    commands.append(f"take {name} from {source['name']}")
    commands += _path(layout, source["room"], target["room"])
    if target["closed"] and target is not source:
        commands.append(f"open {target['name']}")
    if target["kind"] == "c":
        commands.append(f"insert {name} into {target['name']}")
    else:
        commands.append(f"put {name} on {target['name']}")
    return commands


def goal_text(layout: dict[str, Any]) -> str:
    goal = layout["goal"]
    target = layout["furniture"][goal["target"]]
    where = "in" if target["kind"] == "c" else "on"
    return f"put the {goal['object']} {where} the {target['name']}"


def layout_key(layout: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(layout, sort_keys=True).encode()).hexdigest()


def _split_of(key: str) -> Split:
    return "eval" if int(key[:2], 16) % EVAL_BUCKETS == 0 else "train"


def make_household_tasks(
    split: Split,
    n: int,
    seed: int = 0,
    *,
    num_rooms: int = 2,
    num_objects: int = 3,
    min_walkthrough: int = 2,
    max_walkthrough: int = 6,
) -> list[Task]:
    """`n` distinct pick-and-place layouts for `split` whose walkthrough takes
    `min_walkthrough`-`max_walkthrough` commands; train and eval are disjoint. Games are
    compiled later, by the env, on first use."""
    if split not in ("train", "eval"):
        raise ValueError(f"split must be 'train' or 'eval', got {split!r}")
    if min_walkthrough > max_walkthrough:
        raise ValueError(f"min_walkthrough {min_walkthrough} > max_walkthrough {max_walkthrough}")
    rng = random.Random(f"household/{split}/{seed}/{num_rooms}/{num_objects}")
    tasks: list[Task] = []
    seen: set[str] = set()
    for _ in range(200 * n + 1000):
        if len(tasks) == n:
            return tasks
        layout = draw_layout(rng, num_rooms, num_objects)
        key = layout_key(layout)
        plan = walkthrough(layout)
        if key in seen or _split_of(key) != split:
            continue
        if not min_walkthrough <= len(plan) <= max_walkthrough:
            continue
        seen.add(key)
        tasks.append(
            Task(
                task_id=f"household-{split}-{seed}-{len(tasks)}",
                prompt=goal_text(layout),
                answers=[f" {ACTION_SEP} ".join(plan)],
                fields={
                    "layout": json.dumps(layout, sort_keys=True),
                    "walkthrough_length": len(plan),
                },
            )
        )
    raise RuntimeError(
        f"could not draw {n} distinct {split} household layouts ({num_rooms} rooms, walkthroughs "
        f"of {min_walkthrough}-{max_walkthrough} commands)"
    )


# ---------------------------------------------------------------------------------------------
# Games: compiled with TextWorld's generator, cached
# ---------------------------------------------------------------------------------------------


def default_cache_dir() -> Path:
    return (
        Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "agentic_rl" / "household"
    )


def build_game(layout: dict[str, Any]) -> Any:
    """The TextWorld game (`textworld.GameMaker`) of `layout`, its quest the walkthrough."""
    tw = _textworld()
    maker = tw.GameMaker()
    rooms = [maker.new_room(name) for name in layout["rooms"]]
    for i, direction in enumerate(layout["exits"]):
        maker.connect(getattr(rooms[i], direction), getattr(rooms[i + 1], OPPOSITE[direction]))
    maker.set_player(rooms[layout["start"]])
    furniture = []
    for item in layout["furniture"]:
        entity = maker.new(type=item["kind"], name=item["name"])
        if item["kind"] == "c":
            entity.add_property("closed" if item["closed"] else "open")
        rooms[item["room"]].add(entity)
        furniture.append(entity)
    for obj in layout["objects"]:
        furniture[obj["on"]].add(maker.new(type="o", name=obj["name"]))
    maker.set_quest_from_commands(walkthrough(layout))
    return maker


def game_file(layout: dict[str, Any], cache_dir: str | Path = "") -> Path:
    """The compiled game of `layout` (`.z8` plus TextWorld's `.json`), compiled on first use.

    Compiled into a private temporary folder and moved into place (`.json` first, the `.z8`
    last, so a `.z8` that exists is complete): concurrent processes never see half a game."""
    root = Path(cache_dir) if cache_dir else default_cache_dir()
    path = root / f"{layout_key(layout)[:24]}.z8"
    if path.exists():
        return path
    root.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=root) as tmp:
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                built = Path(build_game(layout).compile(str(Path(tmp) / "game.z8")))
        except HouseholdError:
            raise
        except Exception as err:
            raise HouseholdError(f"TextWorld could not compile a household game: {err}") from err
        os.replace(built.with_suffix(".json"), path.with_suffix(".json"))
        os.replace(built, path)
    return path


# ---------------------------------------------------------------------------------------------
# The env
# ---------------------------------------------------------------------------------------------

_SPACES = re.compile(r"\s+")
_FACT = re.compile(r"^(\w+)\((.*)\)$")


def normalize_command(text: str) -> str:
    """Lower case, single spaces, no surrounding quotes or trailing punctuation."""
    return _SPACES.sub(" ", text.strip().strip("`'\"").rstrip(".!").strip().lower())


def _name(arg: str) -> str:
    return arg.rsplit(":", 1)[0].strip()


class HouseholdEnv(DiscreteActionEnv):
    """TextWorld pick-and-place household games (see the module doc)."""

    # The house, as JSON text: a task-file row needs it (envs/base.py).
    task_fields = ("layout",)

    def __init__(
        self,
        max_actions_per_turn: int = 1,
        max_steps: int = 12,
        format_penalty: float = 0.1,
        success_reward: float = 1.0,
        cache_dir: str = "",
        tool_timeout_s: float = 10.0,
    ) -> None:
        del tool_timeout_s  # commands are not tool calls; accepted for a uniform constructor
        super().__init__([], max_actions_per_turn, max_steps, format_penalty)
        self.success_reward = success_reward
        self.cache_dir = cache_dir
        self.game: Any = None
        self.state: Any = None
        self.goal = ""
        self.feedback = ""

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT.format(k=self.max_actions_per_turn)

    def close(self) -> None:
        """Release the game engine (rollouts make fresh envs every step)."""
        if self.game is not None:
            self.game.close()
            self.game = None

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at shutdown the engine may already be gone
            self.close()

    def _new_episode(self, task: Task, seed: int) -> None:
        del seed  # the game is deterministic
        tw = _textworld()
        layout = json.loads(task.fields["layout"])
        path = game_file(layout, self.cache_dir)
        infos = tw.EnvInfos(admissible_commands=True, policy_commands=True, facts=True, won=True)
        self.close()
        with warnings.catch_warnings():  # jericho: "not fully supported" (TextWorld scores)
            warnings.simplefilter("ignore")
            self.game = tw.start(str(path), request_infos=infos)
            self.state = self.game.reset()
        self.goal = goal_text(layout)
        self.feedback = ""
        self._refresh()

    def _refresh(self) -> None:
        commands = [
            normalize_command(c)
            for c in self.state.admissible_commands or []
            if c.split()[0] not in HIDDEN_VERBS
        ]
        self.action_names = sorted(set(commands))

    def parse_token(self, token: str) -> Any | None:
        command = normalize_command(token)
        return command if command in self.action_names else None

    def _apply(self, index: Any) -> tuple[float, bool, bool]:
        self.state, _, done = self.game.step(str(index))
        self.feedback = self._reply(self.state.feedback or "")
        self._refresh()
        won = bool(self.state.won)
        return (self.success_reward if won else 0.0), bool(done) or won, False

    def _success(self) -> bool:
        return self.state is not None and bool(self.state.won)

    @staticmethod
    def _reply(feedback: str) -> str:
        """The game's reply, short: a room's whole description becomes "You enter the X."."""
        text = feedback.split(">")[0]  # after the prompt comes the status line
        room = re.search(r"-= (.+?) =-", text)
        if room:
            return f"You enter the {room.group(1).lower()}."
        text = text.replace("Your score has just gone up by one point.", "")
        return _SPACES.sub(" ", text).strip()

    def _facts(self) -> list[tuple[str, list[str]]]:
        out = []
        for fact in self.state.facts or []:
            match = _FACT.match(str(fact))
            if match:
                out.append((match.group(1), [_name(a) for a in match.group(2).split(",")]))
        return out

    def state_text(self) -> str:
        """Task, last reply, the room with its furniture and contents, inventory, commands."""
        assert self.state is not None, "reset() first"
        facts = self._facts()
        here = next((args[1] for name, args in facts if name == "at" and args[0] == "P"), "")
        held = sorted(args[0] for name, args in facts if name == "in" and args[1] == "I")
        closed = {args[0] for name, args in facts if name == "closed"}
        inside: dict[str, list[str]] = {}
        for name, args in facts:
            if name in ("in", "on") and args[1] != "I":
                inside.setdefault(args[1], []).append(args[0])
        seen = []
        for name, args in facts:
            if name == "at" and args[1] == here and args[0] != "P":
                thing = args[0]
                if thing in closed:
                    seen.append(f"the {thing} (closed)")
                else:
                    things = ", ".join(sorted(inside.get(thing, []))) or "nothing"
                    seen.append(f"the {thing} (holding: {things})")
        lines = [f"Task: {self.goal}."]
        if self.feedback:
            lines.append(self.feedback)
        lines.append(f"You are in the {here}. You see {'; '.join(sorted(seen)) or 'nothing'}.")
        lines.append(f"You carry: {', '.join(held) or 'nothing'}.")
        lines.append(f"Admissible commands: {', '.join(self.action_names)}.")
        return "\n".join(lines)

    def anchor_key(self) -> Hashable:
        """The game state: its facts, sorted (a tuple, so replay bundles can store it)."""
        assert self.state is not None, "reset() first"
        return tuple(sorted(str(fact) for fact in self.state.facts or []))

    def expert_turn(self) -> str:
        """The next commands of TextWorld's walkthrough from the current state (the engine
        re-plans it when the agent strays)."""
        assert self.state is not None, "expert_turn() before reset()"
        if self.done:
            return "<answer>done</answer>"
        plan = [normalize_command(c) for c in self.state.policy_commands or []]
        if not plan:
            raise RuntimeError("TextWorld gives no walkthrough from this state")
        return f"<action>{f' {ACTION_SEP} '.join(plan[: self.expert_budget()])}</action>"
