"""Chat formats: how a model turn becomes an Action and how an observation becomes tokens.

Two formats:
- `TagFormat` (Search-R1 style): `<search>query</search>` stops generation, the result is inserted
  inline as `<information>...</information>` inside the same assistant message; `<answer>a</answer>`
  ends the episode.
- `HermesFormat`: `<tool_call>{"name": ..., "arguments": {...}}</tool_call>` stops generation; the
  result comes back as a `tool` chat turn wrapped in `<tool_response>` using the model's own chat
  template; `<answer>` ends the episode.

Observations are tokenised on their own and appended (loss mask 0). The model's tokens are never
decoded and re-encoded: decoding here is only for parsing the action.

Images: an observation's `images` become the model's image placeholder text (model/vision.py
`image_placeholder`, e.g. Idefics3's `<fake_token_around_image><global-img><image>...`, or
Qwen2-VL's `<|vision_start|><|image_pad|>...<|vision_end|>` sized by the picture) after its
text, which the tokenizer maps to the special ids the model puts the image features at (loss
mask 0, like all inserted text); the images themselves travel beside the tokens
(Trajectory.images).
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Sequence
from typing import Any, Protocol

from agentic_rl.model.tokens import TokenizerCheckError
from agentic_rl.model.vision import ImagePlaceholder, refuse_placeholder_text
from agentic_rl.model.vision import image_placeholder as model_image_placeholder
from agentic_rl.types import Action, ImageRef, Message, Observation

ANSWER_TAG = "answer"


class ChatFormat(Protocol):
    stop: list[str]

    def parse(self, text: str, finish_reason: str) -> Action: ...

    def render_observation(self, observation: Observation) -> str: ...

    def render_action(self, action: Action) -> str: ...


def image_placeholders(placeholder: ImagePlaceholder | None, images: Sequence[ImageRef]) -> str:
    """The placeholder text of `images` ("" for none). `placeholder` gives one picture's
    (model/vision.py `image_placeholder`); None means the model cannot see, which is a setup
    error (an image env with a text-only model), not a model mistake: refused here by name."""
    if not images:
        return ""
    if placeholder is None:
        raise ValueError(
            f"an observation carries {len(images)} image(s) but the model takes no images: "
            "use a vision-language model (model.name=smollm2-135m-vision or a local VLM directory)"
        )
    return "".join("\n" + placeholder(ref) for ref in images)


def _check_text(placeholder: ImagePlaceholder | None, observation: Observation) -> None:
    """A vision-language model's observation text may not hold a placeholder token as text
    (model/vision.py `refuse_placeholder_text`)."""
    if placeholder is not None:
        source = f"tool '{observation.name}'" if observation.name else "the env"
        refuse_placeholder_text(observation.content, f"an observation's text (from {source})")


def with_images(
    messages: list[Message], images: Sequence[ImageRef], placeholder: ImagePlaceholder | None
) -> list[Message]:
    """The opening messages with `images`' placeholders after the last message's text (the
    user turn a reset ends with)."""
    if placeholder is not None:  # a vision-language model: its placeholders are not text
        for message in messages:
            refuse_placeholder_text(message["content"], f"the env's {message['role']} message")
    if not images:
        return messages
    out = [dict(m) for m in messages]
    out[-1]["content"] = out[-1]["content"] + image_placeholders(placeholder, images)
    return out


def _tool_arg_name(tool: Any) -> str:
    """The single string argument a tag-format tool takes (first required, else first property)."""
    schema = getattr(tool, "parameters", {}) or {}
    required = schema.get("required") or list(schema.get("properties", {}))
    if not required:
        raise ValueError(f"tool {tool.name!r} has no parameters: the tag format needs one")
    return required[0]


class TagFormat:
    """`<name>argument</name>` for each tool, `<answer>...</answer>` to finish."""

    def __init__(
        self,
        tools: Sequence[Any],
        answer_tag: str = ANSWER_TAG,
        image_placeholder: ImagePlaceholder | None = None,
    ) -> None:
        self.tools = {t.name: t for t in tools}
        self.image_placeholder = image_placeholder  # a picture's text (None: text-only model)
        self.arg_names = {t.name: _tool_arg_name(t) for t in tools}
        self.result_tags = {t.name: getattr(t, "result_tag", "information") for t in tools}
        self.answer_tag = answer_tag
        names = [*self.tools, answer_tag]
        self.stop = [f"</{n}>" for n in names]
        alternatives = "|".join(re.escape(n) for n in names)
        self._complete = re.compile(rf"<({alternatives})>(.*?)</\1>", re.DOTALL)
        self._opening = re.compile(rf"<({alternatives})>")
        self._closing = re.compile(rf"</({alternatives})>")

    def parse(self, text: str, finish_reason: str) -> Action:
        match = self._complete.search(text)
        if match:
            name, body = match.group(1), match.group(2).strip()
            if name == self.answer_tag:
                return Action(kind="answer", text=body, raw=text)
            if not body:
                return Action(kind="invalid", error=f"empty <{name}> call", raw=text)
            return Action(kind="tool", name=name, arguments={self.arg_names[name]: body}, raw=text)
        opening, closing = self._opening.search(text), self._closing.search(text)
        if opening:
            return Action(kind="invalid", error=f"<{opening.group(1)}> is never closed", raw=text)
        if closing:
            return Action(
                kind="invalid", error=f"</{closing.group(1)}> without an opening tag", raw=text
            )
        if finish_reason == "eos":
            return Action(kind="none", raw=text)
        return Action(kind="invalid", error="no action in this turn", raw=text)

    def render_observation(self, observation: Observation) -> str:
        tag = self.result_tags.get(observation.name, "error")
        _check_text(self.image_placeholder, observation)
        images = image_placeholders(self.image_placeholder, observation.images)
        return f"\n\n<{tag}>{observation.content}{images}</{tag}>\n\n"

    def render_action(self, action: Action) -> str:
        if action.kind == "answer":
            return f"<{self.answer_tag}>{action.text}</{self.answer_tag}>"
        if action.kind == "tool":
            arg = self.arg_names[action.name]
            return f"<{action.name}>{action.arguments[arg]}</{action.name}>"
        raise ValueError(f"cannot render a {action.kind!r} action")


def template_suffix(tokenizer: Any, new_messages: list[Message]) -> str:
    """The text the chat template adds after an assistant turn to append `new_messages` and open
    the next assistant turn. Derived by rendering a probe conversation twice, so it follows the
    model's own template (requires it to be prefix-preserving: see `check_prefix_preserving`)."""
    marker = "AGENTIC_RL_TURN_END"
    base: list[Message] = [
        {"role": "user", "content": "probe"},
        {"role": "assistant", "content": marker},
    ]
    before = tokenizer.apply_chat_template(base, tokenize=False)
    after = tokenizer.apply_chat_template(
        base + new_messages, tokenize=False, add_generation_prompt=True
    )
    if not after.startswith(before.split(marker)[0]) or marker not in after:
        raise TokenizerCheckError("chat template is not prefix-preserving across turns")
    return after[after.index(marker) + len(marker) :]


def tool_message(content: str) -> Message:
    """A tool result as the hermes `tool` chat turn, its text wrapped in `<tool_response>`."""
    return {"role": "tool", "content": f"<tool_response>\n{content}\n</tool_response>"}


class HermesFormat:
    """Hermes / Qwen function calling: JSON tool calls, results in a `tool` turn."""

    def __init__(self, tools: Sequence[Any], tokenizer: Any, answer_tag: str = ANSWER_TAG) -> None:
        self.tools = {t.name: t for t in tools}
        self.tokenizer = tokenizer
        self.image_placeholder = model_image_placeholder(tokenizer)  # None: text-only model
        self.answer_tag = answer_tag
        self.stop = ["</tool_call>", f"</{answer_tag}>"]
        self._call = re.compile(r"<tool_call>(.*?)</tool_call>", re.DOTALL)
        self._answer = re.compile(rf"<{answer_tag}>(.*?)</{answer_tag}>", re.DOTALL)

    def parse(self, text: str, finish_reason: str) -> Action:
        answer, call = self._answer.search(text), self._call.search(text)
        if answer and (not call or answer.start() < call.start()):
            return Action(kind="answer", text=answer.group(1).strip(), raw=text)
        if call:
            try:
                payload = json.loads(call.group(1))
            except json.JSONDecodeError as err:
                return Action(
                    kind="invalid", error=f"tool call is not valid JSON ({err})", raw=text
                )
            if not isinstance(payload, dict) or not isinstance(payload.get("name"), str):
                return Action(kind="invalid", error='tool call needs a "name" string', raw=text)
            arguments = payload.get("arguments", {})
            if isinstance(arguments, str):  # some models double-encode the arguments
                with contextlib.suppress(json.JSONDecodeError):
                    arguments = json.loads(arguments)
            if not isinstance(arguments, dict):
                return Action(kind="invalid", error='"arguments" must be an object', raw=text)
            return Action(kind="tool", name=payload["name"], arguments=arguments, raw=text)
        if "<tool_call>" in text:
            return Action(kind="invalid", error="<tool_call> is never closed", raw=text)
        if finish_reason == "eos":
            return Action(kind="none", raw=text)
        return Action(kind="invalid", error="no action in this turn", raw=text)

    def render_observation(self, observation: Observation) -> str:
        _check_text(self.image_placeholder, observation)
        images = image_placeholders(self.image_placeholder, observation.images)
        return template_suffix(self.tokenizer, [tool_message(observation.content + images)])

    def render_action(self, action: Action) -> str:
        if action.kind == "answer":
            return f"<{self.answer_tag}>{action.text}</{self.answer_tag}>"
        if action.kind == "tool":
            call = json.dumps({"name": action.name, "arguments": action.arguments})
            return f"<tool_call>{call}</tool_call>"
        raise ValueError(f"cannot render a {action.kind!r} action")
