"""The root of the configuration: one field per section. Sections live beside it (algo.py,
rollout.py, train.py); loading and validation in load.py and validate*.py."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any

from agentic_rl.config.algo import AlgoConfig, DistillConfig, FilterConfig, GigpoConfig
from agentic_rl.config.rollout import EnvConfig, ModelConfig, RayConfig, RolloutConfig, VLLMConfig
from agentic_rl.config.train import (
    DPOConfig,
    KnownSelfConfig,
    LearnerConfig,
    OptimConfig,
    PlannerConfig,
    TrainerConfig,
    WarmStartConfig,
)


@dataclass
class Config:
    recipe: str = "default"
    """Recipe name (used for the run directory)."""
    description: str = ""
    """One line shown by `agentic-rl recipes`."""
    model: ModelConfig = field(default_factory=ModelConfig)
    env: EnvConfig = field(default_factory=EnvConfig)
    rollout: RolloutConfig = field(default_factory=RolloutConfig)
    algo: AlgoConfig = field(default_factory=AlgoConfig)
    gigpo: GigpoConfig = field(default_factory=GigpoConfig)
    filters: FilterConfig = field(default_factory=FilterConfig)
    distill: DistillConfig = field(default_factory=DistillConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    warm_start: WarmStartConfig = field(default_factory=WarmStartConfig)
    dpo: DPOConfig = field(default_factory=DPOConfig)
    planner: PlannerConfig = field(default_factory=PlannerConfig)
    knownself: KnownSelfConfig = field(default_factory=KnownSelfConfig)
    learner: LearnerConfig = field(default_factory=LearnerConfig)
    vllm: VLLMConfig = field(default_factory=VLLMConfig)
    ray: RayConfig = field(default_factory=RayConfig)
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    stages: list[dict[str, Any]] = field(default_factory=list)
    """Multi-stage recipes (e.g. SFT then RL, or two RL stages with different rewards): each
    entry is `{name: ..., <sections to change>}` over this recipe's settings; stage k + 1
    starts from stage k's final weights. Filled at load with each stage's complete, validated
    settings (recipe, then the stage, then --smoke, then command-line overrides)."""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)
