"""MiniWoB++ screenshots for a vision-language policy (`screenshots` env option): each
observation carries the task area as an image of the configured size, by hash; off by default.
Real headless Chromium, marked `browser` like tests/envs/test_miniwob_env.py."""

from __future__ import annotations

import hashlib
import importlib.util
from pathlib import Path

import pytest

from agentic_rl.envs.browser.driver import BrowserPool, browser_available
from agentic_rl.envs.browser.miniwob import SCREENSHOT_NOTE, MiniWoBEnv
from agentic_rl.envs.browser.suite import make_miniwob_tasks
from agentic_rl.types import Action, ImageRef

needs_browser = pytest.mark.skipif(
    bool(browser_available()) or importlib.util.find_spec("miniwob") is None,
    reason=browser_available() or "the MiniWoB++ pages need `miniwob` (pip install '.[gui]')",
)


@pytest.fixture(scope="module")
def pool():
    pool = BrowserPool(max_browsers=1, tabs_per_browser=4)
    yield pool
    pool.close()


def check_image(ref: ImageRef, size: tuple[int, int]) -> None:
    from PIL import Image

    data = Path(ref.path).read_bytes()
    assert hashlib.sha256(data).hexdigest() == ref.sha256
    with Image.open(ref.path) as image:
        assert image.size == size
        darkest, brightest = image.convert("L").getextrema()
        assert brightest - darkest > 100  # a drawn page (text on white), not a blank


def test_screenshot_size_is_checked():
    with pytest.raises(ValueError, match="screenshot_size"):
        MiniWoBEnv(screenshots=True, screenshot_size=[0, 10])


@pytest.mark.browser
@needs_browser
def test_screenshots_on_reset_and_step(pool, tmp_path):
    size = (80, 105)
    env = MiniWoBEnv(
        pool=pool, screenshots=True, screenshot_size=list(size), image_dir=str(tmp_path)
    )
    task = make_miniwob_tasks("train", 4, tasks="click-checkboxes")[0]
    first = env.reset(task, seed=0)
    assert len(first.images) == 1
    check_image(first.images[0], size)
    assert first.messages[-1]["content"].endswith(SCREENSHOT_NOTE)
    assert Path(first.images[0].path).is_relative_to(tmp_path)

    step = env.step(
        Action(kind="tool", name="action", arguments={"actions": env.expert_action().render()})
    )
    assert step.observation is not None and len(step.observation.images) == 1
    check_image(step.observation.images[0], size)
    assert step.observation.content.endswith(SCREENSHOT_NOTE)
    assert step.observation.images[0].sha256 != first.images[0].sha256  # a box was ticked

    error = env.step(Action(kind="invalid", error="no action"))
    assert error.observation is not None and len(error.observation.images) == 1


@pytest.mark.browser
@needs_browser
def test_screenshots_off_by_default(pool, tmp_path):
    env = MiniWoBEnv(pool=pool, image_dir=str(tmp_path))
    task = make_miniwob_tasks("train", 4, tasks="click-checkboxes")[0]
    first = env.reset(task, seed=0)
    assert first.images == [] and SCREENSHOT_NOTE not in first.messages[-1]["content"]
    step = env.step(
        Action(kind="tool", name="action", arguments={"actions": env.expert_action().render()})
    )
    assert step.observation is not None and step.observation.images == []
    assert not any(tmp_path.iterdir())


@pytest.mark.browser
@needs_browser
def test_screenshots_reach_a_vision_language_policy(tmp_path, tiny_vlm_dir):
    """The `ui_tars` recipe with a tiny Idefics3 policy and screenshots on: every screenshot
    reaches the context as the model's image placeholders (loss mask 0), and the learner's
    logprobs depend on the pixels (a blank picture in their place changes them)."""
    from PIL import Image

    from agentic_rl.config.load import load_config
    from agentic_rl.learner.batch import collate
    from agentic_rl.learner.update import forward_no_grad
    from agentic_rl.model.images import save_image
    from agentic_rl.model.vision import IMAGE_TOKEN, spec_of_dir
    from agentic_rl.train.collect import rollout
    from agentic_rl.train.setup import build

    cfg = load_config(
        "ui_tars",
        [
            f"model.name={tiny_vlm_dir}",
            "env.options.screenshots=true",
            "rollout.mixed_precision=no",  # float32: the learner's logprobs match exactly
            "learner.mixed_precision=no",
            f"env.options.image_dir={tmp_path / 'images'}",
            "trainer.progress=false",
            "trainer.tensorboard=false",
            f"trainer.out_dir={tmp_path}",
        ],
        smoke=True,
    )
    cfg.rollout.max_turns = 2
    setup = build(cfg)
    played = rollout(setup, setup.train_tasks[:1], 1, seed=0, step=0)
    trajectories = [s[0] for s in played.samples]
    spec = spec_of_dir(str(tiny_vlm_dir))
    image_id = setup.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    for t in trajectories:
        assert len(t.images) >= 1  # the reset's screenshot, one more per observed step
        for ref in t.images:
            check_image(ref, (160, 210))
        slots = [i for i, tok in enumerate(t.token_ids) if tok == image_id]
        assert len(slots) == len(t.images) * spec.tokens_per_image
        assert all(t.loss_mask[i] == 0 for i in slots)
    batch = collate(trajectories, setup.tokenizer.pad_token_id)
    lp, _ = forward_no_grad(setup.policy, batch, 64, 8)
    mask = batch.loss_mask > 0
    # the learner sees the generator's pixels: its logprobs are the behaviour logprobs, and a
    # blank picture instead changes them
    gap = (lp[mask] - batch.behav_logprobs[mask]).abs().max().item()
    blank = save_image(Image.new("RGB", (160, 210), (255, 255, 255)), tmp_path)
    batch.images = [[blank] * len(t.images) for t in trajectories]
    other, _ = forward_no_grad(setup.policy, batch, 64, 8)
    moved = (other[mask] - lp[mask]).abs().max().item()
    assert gap < 2e-4
    assert moved > 5e-4  # well past the generator / learner gap
