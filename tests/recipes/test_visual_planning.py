"""The `visual_planning` recipe: a vision-language policy picks grid-world moves from rendered
images of the state (Visual Planning's simpler variant), warm start then GRPO.

Mechanisms checked, with a tiny Idefics3 model (random text and vision weights) so the real
generator and learner run: every observation's image reaches the context as the model's
placeholder tokens with loss mask 0, one picture per state visited, stored by reference; the
learner gets exactly the pixels the generator saw (its logprobs then equal the behaviour
logprobs, and they do not when the pictures are swapped); and the pixels change the policy.
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
from agentic_rl.model.vision import IMAGE_TOKEN, spec_of_dir
from agentic_rl.train.collect import rollout
from agentic_rl.train.setup import build


def overrides(model_dir, tmp_path) -> list[str]:
    return [
        f"model.name={model_dir}",
        f"env.options.image_dir={tmp_path / 'images'}",
        "trainer.progress=false",
        "trainer.tensorboard=false",
    ]


def test_recipe_config():
    cfg = load_config("visual_planning")
    assert cfg.model.name == "smollm2-135m-vision" and cfg.env.name == "visual_grid"
    assert cfg.algo.name == "grpo" and cfg.warm_start.num_tasks > 0


def test_smoke(tmp_path, tiny_vlm_dir, warm_start_episodes):
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=vp"]
    assert (
        main(["train", "visual_planning", *overrides(tiny_vlm_dir, tmp_path), *out, "--smoke"]) == 0
    )
    rows = [r for r in read_metrics(tmp_path / "vp" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2
    assert warm_start_episodes(tmp_path / "vp") > 0  # expert episodes with images trained on


@pytest.fixture
def episodes(tmp_path, tiny_vlm_dir):
    cfg = load_config("visual_planning", overrides(tiny_vlm_dir, tmp_path), smoke=True)
    cfg.rollout.max_turns = 3
    setup = build(cfg)
    played = rollout(setup, setup.train_tasks[:2], cfg.rollout.group_size, seed=0, step=0)
    return setup, [s[0] for s in played.samples]


def test_images_reach_the_context_as_masked_placeholders(episodes, tiny_vlm_dir):
    setup, trajectories = episodes
    spec = spec_of_dir(str(tiny_vlm_dir))
    image_id = setup.tokenizer.convert_tokens_to_ids(IMAGE_TOKEN)
    for t in trajectories:
        # one picture at reset, one after each turn that the env answered with an observation
        assert 1 <= len(t.images) <= len(t.turn_spans) + 1
        slots = [i for i, tok in enumerate(t.token_ids) if tok == image_id]
        assert len(slots) == len(t.images) * spec.tokens_per_image
        assert all(t.loss_mask[i] == 0 for i in slots)
        first = load_image(t.images[0])  # the start state: the agent's blue circle
        start = setup.train_tasks[[x.task_id for x in setup.train_tasks].index(t.task_id)]
        r, c = start.fields["start"]
        assert first.getpixel((c * 16 + 8, r * 16 + 8)) == (30, 60, 220)


def test_learner_gets_the_generators_pixels(episodes, monkeypatch, tmp_path):
    setup, trajectories = episodes
    batch = collate(trajectories, setup.tokenizer.pad_token_id)
    assert batch.images == [t.images for t in trajectories]
    seen: list[torch.Tensor] = []
    original = vision.pixel_values
    monkeypatch.setattr(
        vision, "pixel_values", lambda rows, spec: seen.append(original(rows, spec)) or seen[-1]
    )
    lp, _ = forward_no_grad(setup.policy, batch, 64, 8)
    mask = batch.loss_mask > 0
    # the learner's logprobs are the behaviour logprobs: it saw the generator's pixels
    assert torch.allclose(lp[mask], batch.behav_logprobs[mask], atol=2e-4)
    expected = original([t.images for t in trajectories], spec_of_dir(setup.cfg.model.name))
    assert any(torch.equal(s, expected) for s in seen)
    # swap every picture for a blank one: the same tokens now get other logprobs
    blank = save_image(Image.new("RGB", (80, 80), (255, 255, 255)), tmp_path)
    batch.images = [[blank] * len(t.images) for t in trajectories]
    other, _ = forward_no_grad(setup.policy, batch, 64, 8)
    assert not torch.allclose(other[mask], batch.behav_logprobs[mask], atol=2e-4)


def test_checkpoint_and_resume_with_a_vision_policy(tmp_path, tiny_vlm_dir):
    common = [
        "train",
        "visual_planning",
        *overrides(tiny_vlm_dir, tmp_path),
        f"trainer.out_dir={tmp_path}",
        "trainer.run_name=r",
        "trainer.save_every=1",
        "warm_start.num_tasks=0",
        "rollout.max_turns=2",
        "env.num_eval_tasks=2",
    ]
    assert main([*common, "trainer.steps=1"]) == 0
    assert main([*common, "trainer.steps=2"]) == 0  # resumes from step 1's checkpoint
    rows = [r for r in read_metrics(tmp_path / "r" / "metrics.jsonl") if "train/reward" in r]
    assert [r["step"] for r in rows] == [1, 2]
    assert (tmp_path / "r" / "checkpoints" / "step_000002").is_dir()


def test_batch_rows_keep_their_images(episodes):
    setup, trajectories = episodes
    batch = collate(trajectories, setup.tokenizer.pad_token_id)
    assert batch.select(slice(1, 3)).images == [t.images for t in trajectories[1:3]]
    assert batch.select(torch.tensor([2, 0])).images == [
        trajectories[2].images,
        trajectories[0].images,
    ]
    mask = torch.tensor([i % 2 == 1 for i in range(len(trajectories))])
    assert batch.select(mask).images == [t.images for t in trajectories[1::2]]


def test_a_qwen2_vl_policy_plays_and_trains(tmp_path, tiny_qwen2_vl_dir):
    """The recipe with the other supported family (picture-sized placeholders, M-RoPE): its
    episodes hold each picture's own number of `<|image_pad|>` tokens with loss mask 0, the
    learner's logprobs on them are the behaviour logprobs (and are not with blank pictures),
    and the smoke run trains through the warm start and GRPO steps."""
    cfg = load_config("visual_planning", overrides(tiny_qwen2_vl_dir, tmp_path), smoke=True)
    cfg.rollout.max_turns = 3
    setup = build(cfg)
    played = rollout(setup, setup.train_tasks[:2], cfg.rollout.group_size, seed=0, step=0)
    trajectories = [s[0] for s in played.samples]
    spec = spec_of_dir(str(tiny_qwen2_vl_dir))
    for t in trajectories:
        slots = [i for i, tok in enumerate(t.token_ids) if tok == spec.image_token_id]
        assert len(slots) == sum(spec.image_tokens(ref) for ref in t.images) > 0
        assert all(t.loss_mask[i] == 0 for i in slots)
    batch = collate(trajectories, setup.tokenizer.pad_token_id)
    lp, _ = forward_no_grad(setup.policy, batch, 64, 8)
    mask = batch.loss_mask > 0  # (the fixture's sharp attention: ~1e-4 of cached-vs-full noise)
    assert torch.allclose(lp[mask], batch.behav_logprobs[mask], atol=5e-4)
    blank = save_image(Image.new("RGB", (80, 80), (255, 255, 255)), tmp_path)
    batch.images = [[blank] * len(t.images) for t in trajectories]
    other, _ = forward_no_grad(setup.policy, batch, 64, 8)
    assert not torch.allclose(other[mask], batch.behav_logprobs[mask], atol=5e-3)
    out = [f"trainer.out_dir={tmp_path}", "trainer.run_name=q"]
    args = ["train", "visual_planning", *overrides(tiny_qwen2_vl_dir, tmp_path), *out, "--smoke"]
    assert main(args) == 0
    rows = [r for r in read_metrics(tmp_path / "q" / "metrics.jsonl") if "train/reward" in r]
    assert len(rows) == 2
