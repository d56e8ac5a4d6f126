"""Page reader: HTML to text, chunking, TF-IDF chunk scores by hand, condensing, summariser."""

import math

import pytest

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.tools.page_reader import (
    LLMSummarizer,
    PageReader,
    chunk_text,
    html_title,
    html_to_text,
    looks_like_html,
    score_chunks,
)
from agentic_rl.types import Completion

PAGE = (
    "<html><head><title>Hamfield</title><style>p {color: red}</style></head><body>"
    "<h1>Hamfield</h1><p>Fish &amp; chips   are sold here.</p><script>track()</script>"
    "<p>The river<br>Temkerk</p><!-- comment --></body></html>"
)


def test_html_to_text_and_title():
    assert html_to_text(PAGE) == "Hamfield\nFish & chips are sold here.\nThe river\nTemkerk"
    assert html_title(PAGE) == "Hamfield"
    assert html_to_text("<p>unclosed <b>bold") == "unclosed bold"
    assert html_to_text("<div><<>></div>") == "<<>>"
    assert html_title("no tags") == ""
    assert looks_like_html(PAGE) and not looks_like_html("a < b and c > d")


def test_chunk_text_by_hand():
    # window "aaaa bbbb. cccc dddd": the sentence end at 9 is past 20 // 3, so cut after "."
    assert chunk_text("aaaa bbbb. cccc dddd eeee ffff", 20) == ["aaaa bbbb.", "cccc dddd eeee ffff"]
    assert chunk_text("ab cd\nef gh\n\n", 20) == ["ab cd\nef gh"]  # short lines merge
    assert chunk_text("x" * 50, 20) == ["x" * 20, "x" * 20, "x" * 10]  # no space: hard cut
    assert chunk_text("", 20) == []
    with pytest.raises(ValueError, match="chunk_chars"):
        chunk_text("x", 5)


def test_score_chunks_by_hand():
    chunks = ["river town", "company town", "other stuff"]
    # "river" is in 1 of 3 chunks: idf = ln(4 / 2) + 1; chunk 0 has tf 1 and length 10
    idf = math.log(2) + 1
    assert score_chunks(chunks, "The river?") == pytest.approx([idf / math.sqrt(10), 0.0, 0.0])
    # "town" is in 2 chunks: idf = ln(4 / 3) + 1; stop words ("which", "the") are ignored
    town = math.log(4 / 3) + 1
    assert score_chunks(chunks, "which town") == pytest.approx(
        [town / math.sqrt(10), town / math.sqrt(12), 0.0]
    )


def _long_page() -> str:
    filler = [f"<p>Paragraph {i} is about weather, sports and other unrelated things.</p>"
              for i in range(60)]  # fmt: skip
    filler.insert(41, "<p>Hamfield lies on the river Temkerk, founded in 1185.</p>")
    return "<html><body>" + "".join(filler) + "</body></html>"


def test_reader_keeps_relevant_chunks_within_budget():
    reader = PageReader(max_chars=400, chunk_chars=120)
    out = reader.read(_long_page(), "On which river lies Hamfield?")
    assert "river Temkerk" in out
    assert len(out) <= 400
    assert "..." in out  # skipped stretches are marked
    lead = reader.read(_long_page())  # no question: the start of the page
    assert lead.startswith("Paragraph 0 is about") and "Temkerk" not in lead
    assert reader.read("short text", "q") == "short text"
    assert reader.read(PAGE, "q").startswith("Hamfield\nFish & chips")


class EchoGenerator:
    def __init__(self, tokenizer, reply: str) -> None:
        self.ids = tokenizer(reply, add_special_tokens=False)["input_ids"]
        self.prompts = []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        return [Completion(self.ids, [0.0] * len(self.ids), "eos") for _ in prompts]


def test_llm_summarizer_with_a_fake_and_the_tiny_model(tokenizer, tiny):
    fake = EchoGenerator(tokenizer, "Hamfield is on the Temkerk.")
    reader = PageReader(max_chars=400, chunk_chars=120, summarizer=LLMSummarizer(fake, tokenizer))
    assert reader.read(_long_page(), "Which river?") == "Hamfield is on the Temkerk."
    prompt = tokenizer.decode(fake.prompts[0])
    assert "Question: Which river?" in prompt and "river Temkerk" in prompt
    empty = LLMSummarizer(EchoGenerator(tokenizer, ""), tokenizer)
    assert empty.summarize("q", "kept text") == "kept text"  # empty output: keep the excerpt
    real = LLMSummarizer(HFGenerator(tiny, tokenizer, prefix_cache=False), tokenizer, 8)
    assert isinstance(real.summarize("q", "some page text"), str)
