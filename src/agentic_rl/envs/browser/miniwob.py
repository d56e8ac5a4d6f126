"""MiniWoB++ web tasks (Liu et al. 2018; the `miniwob` package's HTML pages) in headless Chromium.

Tasks: any task page of the installed `miniwob` package can be named (`tasks`, comma-separated;
`all` is the benchmark's task set, the pages the package registers: suite.py). Five have scripted
experts (experts.py); the others are marked `has_expert=False`, so warm starts and failure
pairs use the experts where they exist and say which tasks they leave out.

An episode is one task page at one page seed. The agent reads the task's utterance and the
page as compact text with element ids (page.py) and writes one action per turn,
`<action>click(3)</action>` (actions.py). The page itself judges the episode: MiniWoB's
`core.endEpisode(reward)` sets the reward when the task is done (clicked the right button: +1;
a wrong one: -1; click-checkboxes: the share of boxes right, from -1 to 1) and the episode
terminates with that reward (or, with `reward="success"`, +1 / -1: REWARDS), success when it
is 1. MiniWoB's reward is scaled down by the
time taken; the raw (unscaled) reward is used here, because wall time on a CPU depends on the
machine, not the agent, and would make runs irreproducible.

Time and step limits: MiniWoB's in-page timer (10 s by default, which a CPU-sampled model cannot
meet) is set to `episode_time_s`; after `max_steps` executed actions the episode is truncated.
An episode that ends unfinished scores what MiniWoB's own timer gives one, -1
(`UNFINISHED_REWARD`): given up (`<answer>`), truncated at `max_steps`, or cut by the rollout's
turn or token budget (`truncation_reward`, added by the rollout). The long timer stands in for
MiniWoB's, and with 0 for an unfinished episode against -1 for a wrong click, stalling would beat
trying wherever the policy clicks right less than half the time. Browser calls have page-load and script time limits (driver.py). A malformed action, an id
that is not on the page or an element that cannot take the action is a model error: an error
observation with the page, `-format_penalty` and the counted `invalid_action` metric (its
reason cut to MAX_WHY characters, as it may quote the model's text). Whenever the page has
ended the episode (MiniWoB's `done`, also after an action that failed or by the page's timer),
the env stops with the page's reward.

Determinism: each task fixes its page seed (`Math.seedrandom`), so a reset always builds the
same page, the same ids and the same expert actions; train and eval tasks use disjoint seeds
(even / odd). Browsers are pooled (driver.py). A reset reuses the tab's page when it already
holds the task (MiniWoB's in-page reset: the problem is regenerated at the seed, the focus
cleared; a test checks it builds the page a fresh load builds) and reloads the page otherwise
or every `reload_every` episodes. When an env's tab was reclaimed or its browser died, the env
resets the page in another tab and replays the episode's actions, so the episode goes on where
it was (an infrastructure failure is never shown to the model).

Screenshots (`screenshots=True`, for a vision-language policy): every observation also carries
the page as the browser draws it (`get_screenshot_as_png`), cropped to MiniWoB's task area (the
160 x 210 `#wrap`; the rest of the window is empty), resized to `screenshot_size` (width x
height, default 160 x 210, the task area at CSS scale) and stored by
content hash (model/images.py `save_image`) under `image_dir` as an `ImageRef`; the text says a
screenshot follows (the chat format puts the image placeholders after it). Off by default: the
text policy pays nothing for it.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Hashable, Sequence
from pathlib import Path
from typing import Any

from agentic_rl.envs.base import check_steppable
from agentic_rl.envs.browser.actions import (
    BrowserAction,
    BrowserActionError,
    execute,
    parse_browser_action,
)
from agentic_rl.envs.browser.driver import BrowserDied, BrowserPool, Lease, shared_pool
from agentic_rl.envs.browser.experts import EXPERTS, ExpertError
from agentic_rl.envs.browser.page import Snapshot, take_snapshot
from agentic_rl.envs.browser.suite import MiniWoBUnavailable, html_dir
from agentic_rl.envs.discrete import ACTION_TOOL
from agentic_rl.envs.vision.scenes import default_image_dir
from agentic_rl.model.images import save_image
from agentic_rl.types import Action, ImageRef, Observation, StepResult, Task

SUCCESS_REWARD = 1.0 - 1e-6  # MiniWoB's raw reward is 1.0 exactly on success
UNFINISHED_REWARD = -1.0  # MiniWoB's timer ends an unfinished episode with -1 (core.js)
REWARDS = ("raw", "success")
"""`reward` choices. raw: MiniWoB's own (unscaled) reward, partial credit included: the
benchmark's. success: +1 for a solved page, -1 for every other ending, the success metric
itself. The two part where a page gives partial credit, e.g. click-checkboxes' (right - wrong)
boxes / boxes: there a policy can raise the raw reward by checking fewer wrong boxes without
solving more pages (seen on the bundled model: GRPO on the raw reward lifted the held-out
checkbox pages' mean reward while their success fell from 25% to 6%)."""
MAX_ATTEMPTS = 3  # an action is tried on this many fresh browsers before the episode fails
SCREENSHOT_SIZE = (160, 210)  # width, height: MiniWoB's task area (#wrap) at CSS scale
SCREENSHOT_NOTE = "Screenshot of the page:"  # the image placeholders follow this text
MAX_WHY = 200  # characters of an error's reason in the observation (it may quote the model)

SYSTEM_PROMPT = (
    "You are a web agent. Read the task and the page, then act on the page. Elements have ids "
    "in brackets. Each turn, write exactly one action inside <action></action>:\n"
    'click(ID) clicks element ID; type(ID, "text") types text into field ID; '
    'select(ID, "option") chooses an option of list ID; press("Enter") presses a key; '
    'scroll("down") or scroll("up") scrolls.\n'
    "Example: <action>click(2)</action>"
)


# True when this tab holds the task page (url) and may be reset in place: then the episode in
# flight is stopped and the focus cleared; otherwise the caller reloads the page.
RESTART_JS = """
if (location.href !== arguments[0] || typeof core === 'undefined') return false;
if ((window.__wobEpisodes || 0) >= arguments[1]) return false;
if (core.EP_TIMER !== null) { clearTimeout(core.EP_TIMER); core.EP_TIMER = null; }
if (document.activeElement && document.activeElement.blur) document.activeElement.blur();
return true;
"""


AREA_JS = """
const wrap = document.getElementById('wrap');
const r = wrap ? wrap.getBoundingClientRect() : {left: 0, top: 0, right: 0, bottom: 0};
return {left: r.left, top: r.top, right: r.right, bottom: r.bottom, view: window.innerWidth};
"""


def _screenshot(driver: Any) -> tuple[bytes, dict[str, float]]:
    """The window's PNG and where MiniWoB's task area lies in it (CSS pixels)."""
    return driver.get_screenshot_as_png(), driver.execute_script(AREA_JS)


class MiniWoBEnv:
    """A MiniWoB++ task in a pooled headless Chromium (see the module doc)."""

    anchor_states = True  # observations carry the page text (GiGPO groups steps on it)
    thread_safe = False  # tabs share a browser's one WebDriver session (driver.py `Lease`)

    def __init__(
        self,
        format_penalty: float = 0.1,
        tool_timeout_s: float = 10.0,
        max_steps: int = 8,
        episode_time_s: float = 600.0,
        max_browsers: int = 1,
        tabs_per_browser: int = 8,
        page_load_timeout_s: float = 30.0,
        reload_every: int = 50,
        pool: BrowserPool | None = None,
        screenshots: bool = False,
        screenshot_size: Sequence[int] = SCREENSHOT_SIZE,
        image_dir: str = "",
        reward: str = "raw",
    ) -> None:
        if reward not in REWARDS:
            raise ValueError(f"reward must be one of {REWARDS}, got {reward!r}")
        if len(screenshot_size) != 2 or min(int(v) for v in screenshot_size) < 1:
            raise ValueError(f"screenshot_size must be [width, height] > 0, got {screenshot_size}")
        if max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {max_steps}")
        if episode_time_s <= 0:
            raise ValueError(f"episode_time_s must be > 0, got {episode_time_s}")
        if reload_every < 1:
            raise ValueError(f"reload_every must be >= 1, got {reload_every}")
        self.tools: list[Any] = [ACTION_TOOL]
        self.format_penalty = format_penalty
        self.reward = reward
        self.max_steps = max_steps
        self.episode_time_s = episode_time_s
        self.reload_every = reload_every
        self._pool = pool
        self.screenshots = screenshots
        self.screenshot_size = (int(screenshot_size[0]), int(screenshot_size[1]))
        self.image_dir = Path(image_dir) if image_dir else default_image_dir()
        self._pool_settings = {
            "max_browsers": max_browsers,
            "tabs_per_browser": tabs_per_browser,
            "page_load_timeout_s": page_load_timeout_s,
            "script_timeout_s": tool_timeout_s,
        }
        self.task: Task | None = None
        self.lease: Lease | None = None
        self.history: list[BrowserAction] = []  # every action tried this episode (for replay)
        self.snapshot: Snapshot | None = None
        self.steps = 0
        self.done = False
        self._reported = False
        self.infra_failures = 0  # browsers lost under this env (replayed on a fresh one)

    @property
    def pool(self) -> BrowserPool:
        if self._pool is None:
            self._pool = shared_pool(**self._pool_settings)
        return self._pool

    # -- browser plumbing -----------------------------------------------------------------
    def _url(self) -> str:
        assert self.task is not None
        page = html_dir() / f"{self.task.fields['miniwob_task']}.html"
        if not page.is_file():
            raise MiniWoBUnavailable(f"no MiniWoB++ page {page}")
        return page.as_uri()

    def _load(self, driver: Any) -> None:
        """Start the task's episode at its page seed in this tab: MiniWoB's own in-page reset
        (regenerate the problem, as its Python driver does between episodes) when the tab
        already holds this task's page, else a full reload of the page (`reload_every`
        episodes also force one, so a page never runs indefinitely)."""
        assert self.task is not None
        url = self._url()
        fresh = driver.execute_script(RESTART_JS, url, self.reload_every) is not True
        if fresh:
            driver.get(url)
        driver.execute_script(
            "Math.seedrandom(arguments[0]); core.EPISODE_MAX_TIME = arguments[1];"
            "core.startEpisodeReal(); window.__wobEpisodes = (window.__wobEpisodes || 0) + 1;",
            str(self.task.fields["page_seed"]),
            int(self.episode_time_s * 1000),
        )
        for _ in range(40):  # some tasks build their page asynchronously
            if driver.execute_script("return WOB_TASK_READY;"):
                return
            time.sleep(0.05)
        raise BrowserDied("the task page never became ready")

    def _restore(self) -> None:
        """A fresh tab at the current state: reload, then replay the episode's actions."""
        if self.lease is not None:
            self.lease.release()
        self.lease = self.pool.acquire()
        self.lease.run(self._load)
        self.lease.run(take_snapshot)  # numbers the elements (data-ref), as the model saw them
        for action in self.history:
            # an action that failed the first time fails again: the model was told then
            with contextlib.suppress(BrowserActionError):
                self.lease.run(execute, action)
            self.lease.run(take_snapshot)

    def _run(self, fn: Any, *args: Any) -> Any:
        """`fn(driver, *args)` in this episode's tab, surviving lost tabs and dead browsers."""
        for _ in range(MAX_ATTEMPTS):
            try:
                if self.lease is None or not self.lease.valid:
                    self._restore()
                assert self.lease is not None
                return self.lease.run(fn, *args)
            except BrowserDied:
                self.infra_failures += 1
                self.lease = None
        raise BrowserDied(f"the browser failed {MAX_ATTEMPTS} times in a row")

    def _release(self) -> None:
        if self.lease is not None:
            self.lease.release()
            self.lease = None

    def __del__(self) -> None:  # the trainer drops envs without closing them
        with contextlib.suppress(Exception):
            self._release()

    def screenshot(self) -> ImageRef:
        """The task area as the browser draws it now, resized to `screenshot_size`, stored by
        hash (module doc)."""
        import io

        from PIL import Image

        png, area = self._run(_screenshot)
        with Image.open(io.BytesIO(png)) as shot:
            scale = shot.width / max(1.0, float(area["view"]))  # device pixels per CSS pixel
            box = [round(float(area[k]) * scale) for k in ("left", "top", "right", "bottom")]
            box = [
                max(0, box[0]),
                max(0, box[1]),
                min(shot.width, box[2]),
                min(shot.height, box[3]),
            ]
            if box[2] <= box[0] or box[3] <= box[1]:  # no task area drawn: the whole window
                box = [0, 0, shot.width, shot.height]
            image = shot.convert("RGB").crop(box)
        image = image.resize(self.screenshot_size, Image.Resampling.BILINEAR)
        return save_image(image, self.image_dir)

    def _with_screenshot(self, observation: Observation) -> Observation:
        """`observation` plus the page's screenshot and the text that announces it (when on)."""
        if not self.screenshots:
            return observation
        if observation.messages:
            last = observation.messages[-1]
            last["content"] = f"{last['content']}\n{SCREENSHOT_NOTE}"
        else:
            observation.content = f"{observation.content}\n{SCREENSHOT_NOTE}"
        observation.images = [self.screenshot()]
        return observation

    # -- the protocol ---------------------------------------------------------------------
    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def reset(self, task: Task, seed: int) -> Observation:
        """Open the task's page; `seed` is unused (the task fixes the page seed)."""
        del seed
        if not isinstance(task.fields.get("miniwob_task"), str):
            raise ValueError(f"task {task.task_id} is not a MiniWoB++ task (no miniwob_task)")
        self._release()
        self.task, self.history, self.steps, self.done = task, [], 0, False
        self._reported = False  # the episode's env/success@TASK key (see step)
        self.snapshot = self._run(take_snapshot)  # opens the page (and survives a dead browser)
        user = f"Task: {self.snapshot.utterance}\nPage:\n{self.snapshot.render()}"
        return self._with_screenshot(
            Observation(
                messages=[
                    {"role": "system", "content": self.system_prompt()},
                    {"role": "user", "content": user},
                ],
                anchor=self.anchor_key(),
            )
        )

    def anchor_key(self) -> Hashable:
        assert self.snapshot is not None
        return (self.snapshot.utterance, self.snapshot.render())

    def step(self, action: Action) -> StepResult:
        """One action (module doc). Every episode also reports its success under its task's
        name, `env/success@TASK` (0 on its first step, its success on its last: the steps'
        sum is the episode's success), which evaluations average over that task's episodes
        (train/summary.py: a subset metric): the per-task success of the suite eval."""
        first = not self._reported
        result = self._step(action)
        assert self.task is not None
        key = f"env/success@{self.task.fields['miniwob_task']}"
        if result.terminated or result.truncated:
            result.info[key] = float(result.info.get("success", 0.0))
        elif first:
            result.info[key] = 0.0
        self._reported = True
        return result

    def _step(self, action: Action) -> StepResult:
        check_steppable(self.task, self.done)
        if action.kind == "answer":  # gives up: the page never said done
            self.done = True
            self._release()
            info = {"answered": 1, "success": 0.0}
            return StepResult(None, UNFINISHED_REWARD, terminated=True, info=info)
        if action.kind != "tool":
            return self._invalid(action.error or "no action in this turn")
        if action.name != ACTION_TOOL.name:
            return self._invalid(f"unknown tag <{action.name}>: write <action>...</action>")
        try:
            parsed = parse_browser_action(str(action.arguments.get("actions", "")))
        except BrowserActionError as err:
            return self._invalid(str(err))
        try:
            self._run(execute, parsed)
            error = ""
        except BrowserActionError as err:  # the model's mistake: shown to it, not a crash
            error = str(err)
        self.history.append(parsed)
        self.snapshot = self._run(take_snapshot)
        info: dict[str, Any] = {"tool_call": 1, "infra_failures": self.infra_failures}
        if self.snapshot.done:  # MiniWoB ended the episode (also by an action that then failed)
            return self._ended({**info, **({"action_error": 1} if error else {})})
        if error:
            return self._invalid(error, {"action_error": 1}, fresh=False)
        self.steps += 1
        if self.steps >= self.max_steps:
            self.done = True
            self._release()
            info["success"] = 0.0  # scored UNFINISHED_REWARD by `truncation_reward`
            return StepResult(None, 0.0, truncated=True, info=info)
        return StepResult(
            self._with_screenshot(
                Observation(
                    content=self.snapshot.render(), name=ACTION_TOOL.name, anchor=self.anchor_key()
                )
            ),
            0.0,
            info=info,
        )

    def truncation_reward(self) -> float:
        """Added by the rollout to an episode truncated unfinished (by `max_steps` or the
        rollout's turn or token budget): MiniWoB's timeout reward (module docstring)."""
        return UNFINISHED_REWARD

    def _ended(self, info: dict[str, Any]) -> StepResult:
        """The page ended the episode: success when MiniWoB's raw reward is 1; the reward is
        the raw one or, with `reward="success"`, +1 / -1 (REWARDS); the env stops (its tab
        goes back to the pool)."""
        assert self.snapshot is not None
        self.done = True
        self._release()
        solved = self.snapshot.raw_reward >= SUCCESS_REWARD
        info["success"] = float(solved)
        reward = self.snapshot.raw_reward if self.reward == "raw" else (1.0 if solved else -1.0)
        return StepResult(None, reward, terminated=True, info=info)

    def _invalid(
        self, why: str, extra: dict[str, Any] | None = None, fresh: bool = True
    ) -> StepResult:
        """An error observation with the page (read afresh unless `fresh=False`: the page may
        have ended the episode meanwhile, e.g. by its timer, which ends it here too) and the
        format penalty. `why` is cut to MAX_WHY characters: it may echo the model's text."""
        if fresh or self.snapshot is None:
            self.snapshot = self._run(take_snapshot)
        if self.snapshot.done:
            return self._ended({"invalid_action": 1, **(extra or {})})
        why = why if len(why) <= MAX_WHY else why[: MAX_WHY - 3] + "..."
        message = (
            f"Invalid action: {why}. Write one action like <action>click(2)</action>.\n"
            f"{self.snapshot.render()}"
        )
        return StepResult(
            self._with_screenshot(
                Observation(content=message, name="error", anchor=self.anchor_key())
            ),
            -self.format_penalty,
            info={"invalid_action": 1, **(extra or {})},
        )

    def expert_action(self) -> BrowserAction:
        """The scripted expert's next action at the current page (experts.py); ExpertError for
        a task without one (only those in EXPERTS have one)."""
        assert self.task is not None and self.snapshot is not None, "reset() first"
        name = self.task.fields["miniwob_task"]
        if name not in EXPERTS:
            raise ExpertError(
                f"MiniWoB++ task {name} has no scripted expert (those with one: "
                f"{', '.join(EXPERTS)})"
            )
        return EXPERTS[name](self.snapshot)

    def expert_turn(self) -> str:
        """The scripted expert's next turn, e.g. `<action>click(3)</action>`."""
        if self.done:
            return "<answer>done</answer>"
        return f"<action>{self.expert_action().render()}</action>"

    def canonical_action(self, action: Action) -> Hashable:
        """What an action does, independent of how it was written (`click( 3 )` = `click(3)`):
        learning from failures compares the agent's action with the expert's by this."""
        if action.kind == "tool" and action.name == ACTION_TOOL.name:
            try:
                return parse_browser_action(str(action.arguments.get("actions", "")))
            except BrowserActionError:
                return ("invalid", str(action.arguments.get("actions", "")))
        return (action.kind, action.name, action.text, action.error)
