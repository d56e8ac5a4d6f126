"""Multi-stage recipes: run the stages of `cfg.stages` in order, each from the last one's weights.

A stage is a complete config (resolved and validated at load, see `Config.stages`) with its own
run directory RUN_DIR/<stage>; every stage but the last exports its final policy to
RUN_DIR/<stage>/model, which the next stage loads as `model.name`. A finished stage (its
summary.json exists) is skipped on a rerun, and an interrupted one resumes from its last
checkpoint, so a killed pipeline picks up where it stopped.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agentic_rl.config.parse import build_dataclass
from agentic_rl.config.schema import Config
from agentic_rl.train.loop import train


def train_recipe(cfg: Config) -> dict[str, Any]:
    """Train a recipe end to end: its stages in order when it has `stages:`, else one run."""
    return train_pipeline(cfg) if cfg.stages else train_one(cfg)


def train_one(cfg: Config) -> dict[str, Any]:
    """One run (or stage): RL with its warm start (`train`), or KnownSelf's label -> SFT ->
    DPO pipeline with `knownself.enabled` (train/knownself.py)."""
    if cfg.knownself.enabled:
        from agentic_rl.train.knownself import train_knownself

        return train_knownself(cfg)
    return train(cfg)


def stage_configs(cfg: Config) -> list[Config]:
    """The stages as configs, chained: stage k + 1's model is stage k's exported policy."""
    configs = [build_dataclass(Config, dict(stage)) for stage in cfg.stages]
    for k, stage in enumerate(configs):
        if k + 1 < len(configs):
            stage.trainer.export_model = True
        if k > 0:
            previous = configs[k - 1]
            stage.model.name = str(_run_dir(previous) / "model")
    return configs


def _run_dir(cfg: Config) -> Path:
    return Path(cfg.trainer.out_dir) / (cfg.trainer.run_name or cfg.recipe)


def train_pipeline(cfg: Config) -> dict[str, Any]:
    """Train every stage; returns (and writes to RUN_DIR/summary.json) the stage summaries."""
    summaries: dict[str, Any] = {}
    for k, stage in enumerate(stage_configs(cfg)):
        name = Path(stage.trainer.run_name).name
        done = _run_dir(stage) / "summary.json"
        if done.exists() and (
            not stage.trainer.export_model or (_run_dir(stage) / "model").is_dir()
        ):
            print(f"stage {k + 1}/{len(cfg.stages)} ({name}): already done, skipped", flush=True)
            summaries[name] = json.loads(done.read_text())
            continue
        print(f"stage {k + 1}/{len(cfg.stages)} ({name}) from model {stage.model.name}", flush=True)
        summaries[name] = train_one(stage)
    out = Path(cfg.trainer.out_dir) / (cfg.trainer.run_name or cfg.recipe)
    out.mkdir(parents=True, exist_ok=True)
    summary = {"recipe": cfg.recipe, "stages": summaries}
    (out / "summary.json").write_text(json.dumps(summary, indent=2))
    return summary
