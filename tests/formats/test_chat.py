import pytest

from agentic_rl.formats.chat import HermesFormat, TagFormat, template_suffix
from agentic_rl.model.tokens import TokenizerCheckError, check_prefix_preserving, encode_text
from agentic_rl.tools.calculator import Calculator
from agentic_rl.tools.search import BM25Search
from agentic_rl.types import Action, Observation

CORPUS = [{"id": "1", "contents": '"Alpha"\nAlpha is a test.'}]


@pytest.fixture
def tags():
    return TagFormat([BM25Search(CORPUS), Calculator()])


def test_tag_format_stops_at_every_closing_tag(tags):
    assert set(tags.stop) == {"</search>", "</calc>", "</answer>"}


@pytest.mark.parametrize(
    ("text", "reason", "kind", "detail"),
    [
        ("I think. <search> Alpha </search>", "stop", "tool", {"query": "Alpha"}),
        ("<calc>2*3</calc>", "stop", "tool", {"expression": "2*3"}),
        ("So <answer> Paris </answer>", "stop", "answer", "Paris"),
        ("<search>unclosed and rambling", "length", "invalid", "never closed"),
        ("text </search>", "stop", "invalid", "without an opening tag"),
        ("<search></search>", "stop", "invalid", "empty <search>"),
        ("<serach>typo</serach>", "eos", "none", ""),
        ("plain prose, then budget ran out", "length", "invalid", "no action"),
        ("prose then end of turn", "eos", "none", ""),
    ],
)
def test_tag_parsing(tags, text, reason, kind, detail):
    action = tags.parse(text, reason)
    assert action.kind == kind
    assert action.raw == text
    if kind == "tool":
        assert action.arguments == detail
    elif kind == "answer":
        assert action.text == detail
    elif kind == "invalid":
        assert detail in action.error


def test_tag_rendering(tags):
    obs = Observation(content="Doc 1(Title: x) y", name="search")
    assert tags.render_observation(obs) == "\n\n<information>Doc 1(Title: x) y</information>\n\n"
    calc = Observation(content="6", name="calc")
    assert "<result>6</result>" in tags.render_observation(calc)
    err = Observation(content="Invalid action", name="error")
    assert "<error>Invalid action</error>" in tags.render_observation(err)
    act = Action(kind="tool", name="search", arguments={"query": "q"})
    assert tags.render_action(act) == "<search>q</search>"


def test_hermes_parsing(tokenizer):
    fmt = HermesFormat([BM25Search(CORPUS)], tokenizer)
    ok = fmt.parse('<tool_call>{"name": "search", "arguments": {"query": "x"}}</tool_call>', "stop")
    assert (ok.kind, ok.name, ok.arguments) == ("tool", "search", {"query": "x"})
    double = fmt.parse(
        '<tool_call>{"name": "search", "arguments": "{\\"query\\": \\"x\\"}"}</tool_call>', "stop"
    )
    assert double.arguments == {"query": "x"}
    bad = fmt.parse("<tool_call>{name: search}</tool_call>", "stop")
    assert bad.kind == "invalid" and "not valid JSON" in bad.error
    assert fmt.parse('<tool_call>{"arguments": {}}</tool_call>', "stop").kind == "invalid"
    assert fmt.parse("<tool_call>{", "length").error == "<tool_call> is never closed"
    assert fmt.parse("<answer>4</answer>", "stop").text == "4"


def test_hermes_observation_is_a_tool_turn(tokenizer):
    fmt = HermesFormat([BM25Search(CORPUS)], tokenizer)
    text = fmt.render_observation(Observation(content="RESULT", name="search"))
    assert text.startswith("<|im_end|>\n<|im_start|>tool\n<tool_response>\nRESULT")
    assert text.endswith("<|im_start|>assistant\n")
    ids = encode_text(tokenizer, text)
    assert ids[0] == tokenizer.convert_tokens_to_ids("<|im_end|>")  # special, one id


def test_bundled_tokenizer_is_prefix_preserving(tokenizer):
    check_prefix_preserving(tokenizer)
    assert template_suffix(tokenizer, [{"role": "user", "content": "x"}]).endswith(
        "<|im_start|>assistant\n"
    )


class RewritingTokenizer:
    """Wraps a tokenizer with a template that drops earlier assistant turns (like templates that
    strip past reasoning): rollouts built turn by turn would not match it."""

    def __init__(self, inner):
        self.inner = inner
        self.eos_token, self.bos_token = inner.eos_token, inner.bos_token
        self.chat_template = "rewrites"

    def __call__(self, *args, **kwargs):
        return self.inner(*args, **kwargs)

    def apply_chat_template(self, messages, **kwargs):
        last = len(messages) - 1
        kept = [m for i, m in enumerate(messages) if m["role"] != "assistant" or i == last]
        return self.inner.apply_chat_template(kept, **kwargs)


def test_non_prefix_preserving_template_fails_loudly(tokenizer):
    with pytest.raises(TokenizerCheckError, match="not prefix-preserving"):
        check_prefix_preserving(RewritingTokenizer(tokenizer))


def test_tokenizer_without_template_fails(tokenizer):
    class NoTemplate:
        chat_template = None

    with pytest.raises(TokenizerCheckError, match="no chat template"):
        check_prefix_preserving(NoTemplate())
