"""ZeroSearch simulated engine: curriculum by hand, prompts, lenient parsing, tool interface."""

import threading

import pytest

from agentic_rl.backends.hf import HFGenerator
from agentic_rl.envs.base import ToolEnv
from agentic_rl.retrieval.simulated import SimulatedSearchEngine, noise_probability, parse_documents
from agentic_rl.tools.base import call_tool
from agentic_rl.types import Completion

FIVE_DOCS = "\n".join(
    f"Doc {i}: Zorvan Kettle is a painter born in Brimholt, document number {i} of five here."
    for i in range(1, 6)
)


class FakeGenerator:
    """Returns fixed text for every prompt and records the prompts it saw."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.prompts: list[list[int]] = []
        self.params = []

    def generate(self, prompts, params):
        self.prompts.extend(prompts)
        self.params.append(params)
        return [
            Completion(token_ids=[1], logprobs=[0.0], finish_reason="eos", text=self.text)
            for _ in prompts
        ]


def test_noise_curriculum_by_hand():
    # p(i) = 0 + (4^(i/m) - 1) / 3 * 0.5
    assert noise_probability(0, 100) == 0.0
    assert noise_probability(50, 100) == pytest.approx((2 - 1) / 3 * 0.5)  # 4^0.5 = 2 -> 1/6
    assert noise_probability(100, 100) == pytest.approx(0.5)
    assert noise_probability(200, 100) == pytest.approx(0.5)  # clamped to m
    assert noise_probability(-5, 100) == 0.0
    assert noise_probability(25, 50, p_start=0.2, p_end=0.8) == pytest.approx(0.2 + 0.6 / 3)
    values = [noise_probability(i, 10) for i in range(11)]
    assert values == sorted(values)  # monotone, slow start (convex)
    assert values[5] - values[0] < values[10] - values[5]
    with pytest.raises(ValueError, match="total_steps"):
        noise_probability(1, 0)


def test_parse_documents():
    assert parse_documents(FIVE_DOCS)[0].startswith("Zorvan Kettle is a painter")
    assert len(parse_documents(FIVE_DOCS)) == 5
    assert len(parse_documents(FIVE_DOCS, max_docs=3)) == 3
    numbered = "Here you go:\n1. alpha beta gamma delta\n2) one two three four five\n3. short"
    assert parse_documents(numbered) == ["alpha beta gamma delta", "one two three four five"]
    bold = "**Doc 1:** the river Temkerk flows here\n**Document 2** - another long line of text"
    assert parse_documents(bold) == [
        "the river Temkerk flows here",
        "another long line of text",
    ]
    lines = "first line has enough words\n\nsecond line has enough words too<|im_end|>"
    assert parse_documents(lines) == [
        "first line has enough words",
        "second line has enough words too",
    ]
    # malformed generations give fewer documents, never an error
    assert parse_documents("") == []
    assert parse_documents("<|im_end|>") == []
    assert parse_documents("Doc 1: Doc 2: Doc 3:") == []
    assert parse_documents("1234 5678 9999 0000 !!!!") == []
    assert parse_documents("dup words are here\ndup words are here") == ["dup words are here"]
    assert len(parse_documents("word " * 500)[0].split()) == 60


def test_useful_prompt_holds_question_and_answer_and_noisy_ones_can_hide_it(tokenizer):
    engine = SimulatedSearchEngine(FakeGenerator(FIVE_DOCS), tokenizer)
    useful = engine.build_prompt("Kettle birthplace", "Where was Zorvan born?", ["Brimholt"], True)
    assert "five useful documents" in useful and "whose answer is Brimholt" in useful
    assert "Where was Zorvan born?" in useful and "Query: Kettle birthplace" in useful
    noisy = engine.build_prompt("Kettle birthplace", "Where was Zorvan born?", ["Brimholt"], False)
    assert "five noisy documents" in noisy and "Brimholt" in noisy  # ZeroSearch's own prompt
    engine.answer_in_noisy_prompt = False
    hidden = engine.build_prompt("Kettle birthplace", "Where?", ["Brimholt"], False)
    assert "Brimholt" not in hidden and "five noisy documents" in hidden


def test_retrieve_has_the_retriever_client_shape(tokenizer):
    fake = FakeGenerator(FIVE_DOCS)
    engine = SimulatedSearchEngine(fake, tokenizer, max_new_tokens=32)
    rows = engine.retrieve(["q one", "q two"], topk=3, question="Q?", answers=["A"])
    assert len(rows) == 2 and all(len(row) == 3 for row in rows)
    item = rows[0][0]
    assert set(item) == {"document", "score"} and set(item["document"]) == {"id", "contents"}
    title, _, text = item["document"]["contents"].partition("\n")
    assert title == '"Zorvan Kettle is a painter"' and text.startswith("Zorvan Kettle")
    assert len({i["document"]["id"] for row in rows for i in row}) == 6
    assert len(fake.prompts) == 2 and fake.params[0].max_new_tokens == 32
    # the prompts went through the chat template and contain the question and answer
    decoded = tokenizer.decode(fake.prompts[0])
    assert "whose answer is A" in decoded and "Query: q one" in decoded
    assert engine.retrieve([]) == []


def test_noise_draws_follow_p_noisy(tokenizer):
    engine = SimulatedSearchEngine(FakeGenerator(FIVE_DOCS), tokenizer, seed=3)
    engine.retrieve(["q"] * 200)
    assert engine.counts["noisy"] == 0 and engine.counts["useful"] == 200  # p_noisy starts at 0
    assert engine.set_step(10, 10) == pytest.approx(0.5)
    engine.retrieve(["q"] * 400)
    assert 150 < engine.counts["noisy"] < 250
    fake = FakeGenerator(FIVE_DOCS)
    forced = SimulatedSearchEngine(fake, tokenizer, p_noisy=1.0)
    forced.retrieve(["q", "r"], useful=[True, False])
    assert "five useful" in tokenizer.decode(fake.prompts[0])
    assert "five noisy" in tokenizer.decode(fake.prompts[1])
    with pytest.raises(ValueError, match="useful flags"):
        forced.retrieve(["q"], useful=[True, False])


def test_tool_in_an_env_and_with_malformed_generations(tokenizer):
    engine = SimulatedSearchEngine(FakeGenerator("garbage"), tokenizer)
    tool = engine.tool("Where was Zorvan born?", ["Brimholt"])
    assert (
        call_tool(tool, {"query": "Zorvan"}, timeout_s=5).text == "No results found for 'Zorvan'."
    )
    assert not call_tool(tool, {"query": "  "}, timeout_s=5).ok
    good = SimulatedSearchEngine(FakeGenerator(FIVE_DOCS), tokenizer).tool(topk=2)
    good.set_task("Where was Zorvan born?", ["Brimholt"])
    text = call_tool(good, {"query": "Zorvan"}, timeout_s=5).text
    assert text.startswith('Doc 1(Title: "Zorvan Kettle is a painter") Zorvan Kettle')
    assert text.count("\n") == 1  # two documents
    assert isinstance(ToolEnv([good]).tools[0], type(good))


def test_with_the_tiny_random_model(tokenizer, tiny):
    generator = HFGenerator(tiny, tokenizer, prefix_cache=False)
    engine = SimulatedSearchEngine(generator, tokenizer, max_new_tokens=12, seed=1)
    rows = engine.retrieve(["who is Zorvan Kettle", "Brimholt river"], question="Q?", answers=["A"])
    assert len(rows) == 2  # random text parses into 0..5 documents without errors
    for row in rows:
        assert len(row) <= 5
        for item in row:
            assert item["document"]["contents"].startswith('"')
    tool = engine.tool("Q?", ["A"])
    outcome = call_tool(tool, {"query": "Zorvan"}, timeout_s=60)
    assert outcome.ok and isinstance(outcome.text, str)


def test_engine_is_thread_safe(tokenizer):
    engine = SimulatedSearchEngine(FakeGenerator(FIVE_DOCS), tokenizer, p_noisy=0.5)
    threads = [threading.Thread(target=engine.retrieve, args=(["q"] * 10,)) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert engine.counts["useful"] + engine.counts["noisy"] == 40
    assert engine.counts["docs"] == 40 * 5
