"""Data types shared by every layer: messages, actions, env steps, trajectories.

Trajectories are token-native: `token_ids` are exactly the ids the policy sampled plus the ids
the framework inserted (prompt, observations). Nothing is ever rebuilt from decoded text.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass, field
from typing import Any, Literal

Message = dict[str, str]
"""A chat message, `{"role": "system" | "user" | "assistant" | "tool", "content": str}`."""


@dataclass(frozen=True)
class ImageRef:
    """An image by reference: the file it is stored in and the sha256 of that file's bytes.

    Trajectories, checkpoints and logs hold these, never pixels: an episode stays as small as its
    token ids, and whoever reads the pixels (the generator, the learner) checks the hash, so a
    changed or missing file fails loudly instead of training on other pixels than were seen
    (model/vision.py writes and reads them)."""

    path: str
    sha256: str


@dataclass
class Task:
    """One problem instance an env is reset with.

    `answers` holds the accepted gold answers (any match counts); `fields` carries whatever else a
    reward function or env needs (support documents, difficulty...), TRL-style `**columns`.
    """

    task_id: str
    prompt: str
    answers: list[str] = field(default_factory=list)
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Observation:
    """What the env shows the agent.

    `reset` returns the opening messages (system + user). `step` returns the text of a tool result
    or an error in `content`, with `name` set to the tool (or "error"); the rollout's chat format
    decides how it is wrapped into tokens (inline `<information>` tags, a hermes `tool` turn...).
    """

    messages: list[Message] = field(default_factory=list)
    content: str = ""
    name: str = ""
    anchor: Hashable | None = None
    """A hashable summary of the env state (GiGPO anchor-state grouping); None if not defined."""
    images: list[ImageRef] = field(default_factory=list)
    """Images shown with this observation, in order. The chat format puts the model's image
    placeholder tokens for them after the text (loss mask 0); for `reset`, after the last
    message's text. Empty for text-only envs."""
    role: str = ""
    """Multi-agent conversation envs: the role whose conversation these `messages` open (one
    of the env's `roles`); empty for an env with one agent."""


ActionKind = Literal["tool", "answer", "invalid", "none"]


@dataclass
class Action:
    """A parsed model turn.

    kind "tool": call `name` with `arguments`; "answer": final answer in `text`; "invalid": the turn
    had a malformed action (`error` says why); "none": the model stopped without any action.
    `raw` is the decoded text of the whole turn, for reward functions that read the completion.
    """

    kind: ActionKind
    name: str = ""
    arguments: dict[str, Any] = field(default_factory=dict)
    text: str = ""
    error: str = ""
    raw: str = ""


@dataclass
class StepResult:
    """Gymnasium-style step output. `terminated`: the task ended (answer given, goal reached);
    `truncated`: a budget cut the episode. `observation` is None when nothing is inserted."""

    observation: Observation | None
    reward: float = 0.0
    terminated: bool = False
    truncated: bool = False
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Completion:
    """One continuation from a Generator: the sampled ids and their behaviour logprobs.

    finish_reason: "stop" (a stop string / action end tag was produced), "eos", or "length".
    """

    token_ids: list[int]
    logprobs: list[float]
    finish_reason: Literal["stop", "eos", "length"]
    text: str = ""
    policy_version: int = 0
    """Version (number of learner updates) of the weights that sampled it; set by generators
    whose weights can lag the learner's (asynchronous rollouts)."""
    inserted: list[tuple[int, int]] = field(default_factory=list)
    """[start, end) ranges of `token_ids` the framework inserted mid-turn (the thinking budget's
    stop phrase) or that are shown but not trained (a warm start's scripted mistake, the whole
    turn): loss mask 0, logprob 0 (their `logprobs` entries are placeholders)."""
    entropies: list[float] | None = None
    """The entropy (nats) of the distribution each of the first `SamplingParams.entropy_tokens`
    sampled tokens was drawn from, one per token; None where not asked for (computing it costs
    a softmax over the vocabulary per step) or where the generator cannot give it. ARPO's
    entropy-triggered branching reads it (rollout.tree.branch=entropy)."""


@dataclass
class SamplingParams:
    """Per-request sampling settings. temperature 0 means greedy."""

    max_new_tokens: int = 128
    temperature: float = 1.0
    top_p: float = 1.0
    stop: list[str] = field(default_factory=list)
    seed: int | None = None
    entropy_tokens: int = 0
    """Report `Completion.entropies` for the first this-many sampled tokens; 0 = not computed."""


@dataclass(frozen=True)
class TreePosition:
    """Where a leaf of a tree rollout (rollout.tree, rollout/tree.py) sits in its tree.

    A branch copies its parent's first `shared_turns` model turns (with the observations after
    them) token for token, ids, loss mask and behaviour logprobs, so the first `shared_tokens`
    token ids of the two leaves are identical; the rest the branch sampled itself."""

    tree_id: str
    """Unique in the batch: the task's group and the root's index."""
    leaf: int
    """This leaf's index in its tree; 0 is the root chain."""
    parent: int = -1
    """The leaf it branched from (-1: the root chain)."""
    shared_turns: int = 0
    """Model turns copied from the parent (0: nothing but the prompt)."""
    shared_tokens: int = 0
    """Token ids copied from the parent (the prompt included; 0 for the root chain)."""


@dataclass
class Trajectory:
    """One episode, token by token.

    token_ids  [T]  prompt + every turn + every observation, exactly as sampled / inserted
    loss_mask  [T]  1 = generated by the policy, 0 = injected (prompt, observations)
    logprobs   [T]  behaviour logprobs of sampled tokens (0 where loss_mask == 0)
    turn_spans      [start, end) token ranges of each model turn
    step_rewards    one entry per model turn (env/tool step rewards), same order as turn_spans
    token_versions  [T] policy version that sampled each token (-1 where loss_mask == 0);
                    `policy_version` is the oldest of them. Empty = unrecorded.
    """

    token_ids: list[int]
    loss_mask: list[int]
    logprobs: list[float]
    prompt_length: int
    turn_spans: list[tuple[int, int]] = field(default_factory=list)
    step_rewards: list[float] = field(default_factory=list)
    reward: float = 0.0
    group_id: str = ""
    task_id: str = ""
    anchors: list[Hashable] = field(default_factory=list)
    policy_version: int = 0
    token_versions: list[int] = field(default_factory=list)
    terminated: bool = False
    truncated: bool = False
    metrics: dict[str, float] = field(default_factory=dict)
    completion_text: str = ""
    """Decoded model + observation text after the prompt, for reward functions and logs only."""
    images: list[ImageRef] = field(default_factory=list)
    """The images whose placeholder tokens are in `token_ids`, in order of appearance."""
    role: str = ""
    """The agent role that wrote this sample's turns (multi-agent envs); empty otherwise."""
    tree: TreePosition | None = None
    """Tree rollouts: this leaf's place in its tree (None: an independent episode)."""

    def __post_init__(self) -> None:
        n = len(self.token_ids)
        versions = len(self.token_versions)
        if len(self.loss_mask) != n or len(self.logprobs) != n or versions not in (0, n):
            raise ValueError(
                f"trajectory lengths differ: token_ids={n}, loss_mask={len(self.loss_mask)}, "
                f"logprobs={len(self.logprobs)}, token_versions={versions}"
            )

    @property
    def num_generated(self) -> int:
        return sum(self.loss_mask)
