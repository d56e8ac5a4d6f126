"""The alignment stage of a grafted vision tower (train/vision_align.py) and its stage 0, the
tower's own pretraining (train/vision_pretrain.py)."""

from __future__ import annotations

import json
import random

import torch

from agentic_rl.envs.vision.scenes import make_visual_qa_tasks, scene_of
from agentic_rl.model.vision import spec_of_dir
from agentic_rl.train.vision_align import accuracy, align_vision, learning_rate_groups
from agentic_rl.train.vision_pretrain import (
    CONTENT_CLASSES,
    cell_labels,
    prealign_connector,
    pretrain_tower,
    random_scene,
    split_scenes,
)
from agentic_rl.types import Trajectory


def sample(success: float) -> list[Trajectory]:
    return [Trajectory([1], [0], [0.0], 1, metrics={"success": success})]


def load_vlm(path):
    from transformers import AutoModelForImageTextToText

    return AutoModelForImageTextToText.from_pretrained(path, dtype=torch.float32)


def test_accuracy_per_kind_and_majority_baseline():
    tasks = make_visual_qa_tasks("eval", 4, kinds=["count", "colour"])
    assert [t.fields["kind"] for t in tasks] == ["count", "colour"] * 2
    tasks[2].answers = [tasks[0].answers[0]]  # two count questions with the same answer
    tasks[1].answers, tasks[3].answers = ["red"], ["blue"]  # two colours, one each
    got = accuracy([sample(1.0), sample(0.0), sample(0.0), sample(1.0)], tasks)
    assert got["accuracy"] == 0.5
    assert got["accuracy/count"] == 0.5 and got["accuracy/colour"] == 0.5
    assert got["majority/count"] == 1.0  # both count questions share their answer
    assert got["majority/colour"] == 0.5 and got["majority"] == 0.75


def test_cell_labels_follow_the_patch_order():
    scene = {(0, 1): ("circle", "red"), (1, 0): ("digit", "7"), (1, 1): ("wall", "")}
    labels = cell_labels(scene, 2)
    assert [CONTENT_CLASSES[i] for i in labels] == [
        ("empty", ""),
        ("circle", "red"),
        ("digit", "7"),
        ("wall", ""),
    ]
    held_out = {repr(sorted(s.items())) for s in split_scenes(random.Random(0), 50, 5, 5, "eval")}
    trained = {repr(sorted(s.items())) for s in split_scenes(random.Random(0), 200, 5, 5, "train")}
    assert not held_out & trained
    assert random_scene(random.Random(1), 5, 3).keys() <= {
        (r, c) for r in range(5) for c in range(5)
    }
    # the env's held-out scenes are in the eval split of the pretraining data too
    qa = make_visual_qa_tasks("eval", 20)
    assert not {repr(sorted(scene_of(t).items())) for t in qa} & trained


def test_tower_pretraining_learns_to_read_cells_and_drops_its_heads(tiny_vlm_dir):
    model = load_vlm(tiny_vlm_dir)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    torch.manual_seed(0)
    result = pretrain_tower(
        model, steps=150, batch_size=64, lr=3e-3, max_objects=4, eval_scenes=128
    )
    probe = result["probe_after"]
    # 30 content classes: chance on an occupied cell is ~1/29; the tiny tower (hidden 16) reads
    assert probe["occupied_cells"] > 0.5, result
    assert probe["cells"] > probe["majority_cells"] + 0.1, result
    after = model.state_dict()
    assert after.keys() == before.keys()  # the heads are not saved into the model
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(".vision_model." in f".{k}" for k in changed)  # only the tower trained
    assert all(p.requires_grad for p in model.parameters())  # gradients left as they were


def test_connector_warm_start_maps_cells_to_their_caption_words(tiny_vlm_dir, tokenizer):
    model = load_vlm(tiny_vlm_dir)
    torch.manual_seed(0)
    pretrain_tower(model, steps=150, batch_size=64, lr=3e-3, max_objects=4, eval_scenes=16)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    untrained = prealign_connector(model, tokenizer, steps=0, max_objects=4)
    result = prealign_connector(model, tokenizer, steps=150, lr=1e-2, max_objects=4)
    # each image token's nearest caption-word embedding is its own cell's (30 classes)
    assert result["token_accuracy_occupied"] > 0.5, result
    assert result["token_accuracy_occupied"] > untrained["token_accuracy_occupied"] + 0.4, untrained
    assert result["mean_cosine"] > untrained["mean_cosine"]
    after = model.state_dict()
    changed = {k for k in after if not torch.equal(after[k], before[k])}
    assert changed and all(".connector." in f".{k}" for k in changed)  # only the connector


def test_learning_rate_groups_freeze_the_parts_at_rate_zero(tiny_vlm_dir):
    model = load_vlm(tiny_vlm_dir)
    groups, trainable = learning_rate_groups(model, {"tower": 0.0, "connector": 1e-3, "text": 1e-4})
    assert [g["lr"] for g in groups] == [1e-3, 1e-4]
    assert trainable["tower"] == 0 and trainable["connector"] > 0 and trainable["text"] > 0
    for name, param in model.named_parameters():
        assert param.requires_grad == (".vision_model." not in f".{name}")


def test_stage_trains_saves_and_reports(tmp_path, tiny_vlm_dir, monkeypatch):
    monkeypatch.setenv("AGENTIC_RL_CACHE", str(tmp_path / "cache"))  # images written there
    out = tmp_path / "aligned"
    result = align_vision(
        str(tiny_vlm_dir),
        out,
        train_tasks=8,
        eval_tasks=5,
        epochs=1,
        batch_size=4,
        freeze_text=True,
        pretrain_steps=3,
        pretrain_batch_size=8,
        connector_steps=3,
    )
    assert result["sft"]["steps"] == 2 and result["trained"] == {"connector": 5e-4}
    assert result["caption_examples"] == 4 and result["question_examples"] == 4
    assert result["stage0_pretrain"]["steps"] == 3 and result["stage0_connector"]["steps"] == 3
    assert 0.0 <= result["stage0_pretrain"]["probe_after"]["occupied_cells"] <= 1.0
    assert 0.0 <= result["after"]["accuracy"] <= 1.0 and "accuracy/colour" in result["after"]
    assert "accuracy/describe" not in result["after"]  # captions train, questions measure
    assert spec_of_dir(str(out)) == spec_of_dir(str(tiny_vlm_dir))  # a loadable VLM directory
    saved = json.loads((out / "alignment.json").read_text())
    assert saved["train_examples"] == 8 and saved["peak_rss_gib"] > 0
    original, aligned = load_vlm(tiny_vlm_dir).state_dict(), load_vlm(out).state_dict()
    moved = {k for k in original if not torch.equal(original[k], aligned[k])}
    assert any(".connector." in k for k in moved) and any(".vision_model." in k for k in moved)
    assert not any(".text_model." in k or "lm_head" in k for k in moved)  # text frozen
