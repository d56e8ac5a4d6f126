"""The `openthinkimg` recipe: visual tools (zoom, OCR, draw) on small-text charts and diagrams,
warm start on the tool-using expert, then GRPO with a reward on the final answer.

Mechanism checked with a tiny Idefics3 model (random weights, so the real generator and learner
run): the zoom tool's image is the next observation and reaches the model. After a zoom turn
the context holds two images (img_1 and the zoomed region) as masked placeholders, the
generator's next call is given both images' pixels, the learner scores that next turn with the
same pixels (its logprobs equal the behaviour logprobs), and swapping only the zoomed picture
changes them: the tool's output is what the policy conditions on.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

import agentic_rl.model.vision as vision
from agentic_rl.cli import main
from agentic_rl.config.load import load_config
from agentic_rl.learner.batch import collate
from agentic_rl.learner.update import forward_no_grad
from agentic_rl.logging import read_metrics
from agentic_rl.model.images import load_image, save_image
from agentic_rl.model.tokens import encode_text
from agentic_rl.model.vision import IMAGE_TOKEN, spec_of_dir
from agentic_rl.rollout.actors import policy_actor
from agentic_rl.train.collect import play
from agentic_rl.train.setup import build
from agentic_rl.types import Completion


def overrides(model_dir, tmp_path) -> list[str]:
    return [
        f"model.name={model_dir}",
        f"env.options.image_dir={tmp_path / 'images'}",
        "trainer.progress=false",
        "trainer.tensorboard=false",
    ]


def test_recipe_config():
    cfg = load_config("openthinkimg")
    assert cfg.model.name == "smollm2-135m-vision" and cfg.env.name == "visual_tools"
    assert cfg.env.options["tools"] == "zoom,ocr,draw_box,draw_line"
    assert cfg.rollout.max_turns == cfg.env.options["max_tool_calls"] + 1  # 3 rounds + answer
    assert cfg.algo.name == "grpo" and cfg.warm_start.num_tasks > 0
    baseline = load_config("openthinkimg", ["env.options.tools=none"])
    assert baseline.env.options["tools"] == "none"


def test_smoke(tmp_path, tiny_vlm_dir, warm_start_episodes):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=oti"]
    assert main(["train", "openthinkimg", *overrides(tiny_vlm_dir, tmp_path), *out, "--smoke"]) == 0
    rows = [r for r in read_metrics(tmp_path / "oti" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2
    assert warm_start_episodes(tmp_path / "oti") > 0  # expert tool-use episodes trained on


@pytest.fixture
def zoomed(tmp_path, tiny_vlm_dir, monkeypatch):
    """Episodes whose first turn is the expert's zoom and whose second is sampled by the tiny
    VLM; records the image rows every forward pass got."""
    cfg = load_config("openthinkimg", overrides(tiny_vlm_dir, tmp_path), smoke=True)
    cfg.rollout.max_turns = 2
    setup = build(cfg)
    tasks = [t for t in setup.train_tasks if t.fields["kind"] != "which"][:2]
    seen: list[list[list]] = []
    original = vision.pixel_values
    monkeypatch.setattr(
        vision,
        "pixel_values",
        lambda rows, spec: seen.append([list(r) for r in rows]) or original(rows, spec),
    )
    policy = policy_actor(
        setup.generator, setup.fmt, cfg.rollout, seed=0, tokenizer=setup.tokenizer
    )

    def act(episodes, budgets, turn):
        if turn > 0:
            return policy(episodes, budgets, turn)
        out = []
        for ep in episodes:
            ids = encode_text(setup.tokenizer, ep.env.expert_turn())
            out.append(Completion(ids, [-1.0] * len(ids), "stop", setup.tokenizer.decode(ids)))
        return out

    played = play(setup, tasks, ["a", "b"], act, seed=0)
    return setup, [samples[0] for samples in played], seen


def test_the_zoomed_image_is_the_next_observation_and_reaches_the_model(zoomed, tiny_vlm_dir):
    setup, trajectories, seen = zoomed
    spec = spec_of_dir(str(tiny_vlm_dir))
    image_id = setup.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    for t in trajectories:
        assert len(t.images) == 2  # img_1 at reset, the zoom after the first turn
        first, zoom = (load_image(ref) for ref in t.images)
        assert first.size == (320, 320) and zoom.size != first.size  # a region, upscaled
        slots = [i for i, tok in enumerate(t.token_ids) if tok == image_id]
        assert len(slots) == 2 * spec.tokens_per_image
        assert all(t.loss_mask[i] == 0 for i in slots)
        (_, first_end), (second_start, _) = t.turn_spans[0], t.turn_spans[1]
        assert slots[spec.tokens_per_image] > first_end  # the zoom's placeholders follow turn 1
        assert slots[-1] < second_start  # ... and come before the sampled second turn
        assert "img_2: zoom of" in setup.tokenizer.decode(t.token_ids[first_end:second_start])
    # the generator's second-turn call was given both pictures of each episode
    assert [t.images for t in trajectories] in seen


def test_the_learner_scores_the_next_turn_with_the_zoomed_pixels(zoomed, tmp_path):
    setup, trajectories, _ = zoomed
    batch = collate(trajectories, setup.tokenizer.pad_token_id)
    second = torch.zeros_like(batch.loss_mask, dtype=torch.bool)
    for row, t in enumerate(trajectories):
        start, end = t.turn_spans[1]
        second[row, start:end] = batch.loss_mask[row, start:end] > 0
    assert second.any()
    lp, _ = forward_no_grad(setup.policy, batch, 64, 8)
    assert torch.allclose(lp[second], batch.behav_logprobs[second], atol=2e-4)
    blank = save_image(Image.new("RGB", (320, 320), (255, 255, 255)), tmp_path)
    batch.images = [[t.images[0], blank] for t in trajectories]  # only the zoom is swapped
    other, _ = forward_no_grad(setup.policy, batch, 64, 8)
    assert not torch.allclose(other[second], batch.behav_logprobs[second], atol=2e-4)
