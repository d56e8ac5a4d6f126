"""The python_calls chat format: the turn's text is the action; observations are chat turns."""

from __future__ import annotations

from agentic_rl.formats.calls import USER, CallListFormat
from agentic_rl.formats.registry import make_chat_format
from agentic_rl.types import Action, Observation


def test_parse_keeps_the_text_without_special_tokens(tokenizer):
    fmt = make_chat_format("python_calls", [], tokenizer)
    assert isinstance(fmt, CallListFormat) and fmt.stop == []
    action = fmt.parse("[f(a=1)]<|im_end|>", "eos")
    assert (action.kind, action.text, action.raw) == ("answer", "[f(a=1)]", "[f(a=1)]<|im_end|>")
    assert fmt.parse("no calls here", "length").text == "no calls here"


def test_observations_are_tool_or_user_turns_and_actions_end_the_turn(tokenizer):
    fmt = CallListFormat([], tokenizer)
    tool = fmt.render_observation(Observation(content="RESULT", name="tool"))
    user = fmt.render_observation(Observation(content="NEXT", name=USER))
    assert "<|im_start|>tool\nRESULT<|im_end|>" in tool and tool.endswith("<|im_start|>assistant\n")
    assert "<|im_start|>user\nNEXT<|im_end|>" in user and user.endswith("<|im_start|>assistant\n")
    assert fmt.render_action(Action(kind="answer", text="[f()]")) == "[f()]" + tokenizer.eos_token
