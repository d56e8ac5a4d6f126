"""ZeroSearch env: the noise curriculum follows training progress; searches hit the simulator."""

import math

import pytest

from agentic_rl.envs.check import check_env
from agentic_rl.envs.search import zerosearch as zs
from agentic_rl.envs.search.multihop import make_multihop_tasks
from agentic_rl.envs.search.zerosearch import ZeroSearchQAEnv
from agentic_rl.retrieval.simulated import SimulatedSearchTool
from agentic_rl.tools.search import BM25Search
from agentic_rl.types import Action, Completion


class KindEchoGenerator:
    """A simulator that writes 'useful' or 'noisy' documents according to the prompt it got,
    and records its calls."""

    def __init__(self, tokenizer):
        self.tokenizer = tokenizer
        self.calls: list[int] = []

    def generate(self, prompts, params):
        self.calls.append(len(prompts))
        out = []
        for ids in prompts:
            kind = "useful" if "Useful Output" in self.tokenizer.decode(ids) else "noisy"
            text = "\n".join(
                f"Doc {i}: a {kind} document about the query, number {i}." for i in (1, 2, 3)
            )
            out.append(Completion([1], [0.0], "eos", text=text))
        return out


@pytest.fixture
def fake_simulator(monkeypatch, tokenizer):
    generator = KindEchoGenerator(tokenizer)
    monkeypatch.setattr(zs, "load_simulator", lambda name: (generator, tokenizer))
    zs.shared_engine.cache_clear()
    yield generator
    zs.shared_engine.cache_clear()


def test_noise_probability_follows_progress_by_hand(fake_simulator):
    # p(f) = p_s + (4^f - 1) / 3 * (p_e - p_s): 0, (sqrt 2 - 1) / 6, (2 - 1) / 6, 3 / 6
    expected = {0.0: 0.0, 0.25: (math.sqrt(2) - 1) / 6, 0.5: 1 / 6, 1.0: 0.5}
    for progress, p in expected.items():
        env = ZeroSearchQAEnv(progress=progress)
        assert env.p_noisy == pytest.approx(p)
        assert env.engine_kind == "simulated"
        (tool,) = env.tools
        assert isinstance(tool, SimulatedSearchTool) and tool.p_noisy == pytest.approx(p)
    # other end points: 0.1 + (2 - 1) / 3 * 0.6 = 0.3
    env = ZeroSearchQAEnv(progress=0.5, noise_start=0.1, noise_end=0.7)
    assert env.p_noisy == pytest.approx(0.3)


def test_share_of_noisy_results_rises_with_progress(fake_simulator):
    task = make_multihop_tasks("train", 1)[0]
    shares = {}
    for progress in (0.0, 0.5, 1.0):
        env = ZeroSearchQAEnv(progress=progress, cache_size=0)
        env.reset(task, 0)
        noisy = 0
        for i in range(300):
            result = env.step(Action(kind="tool", name="search", arguments={"query": f"q{i}"}))
            noisy += "noisy document" in result.observation.content
        shares[progress] = noisy / 300
    assert shares[0.0] == 0.0  # useful only at the start of the curriculum
    assert abs(shares[0.5] - 1 / 6) < 0.07  # binomial sd 0.022 at n = 300
    assert abs(shares[1.0] - 0.5) < 0.1  # sd 0.029
    assert shares[0.0] < shares[0.5] < shares[1.0]


def test_a_search_is_answered_by_the_simulator_with_the_task_in_its_prompt(
    fake_simulator, tokenizer
):
    task = make_multihop_tasks("train", 1)[0]
    env = ZeroSearchQAEnv(progress=0.0)
    env.reset(task, 0)
    result = env.step(Action(kind="tool", name="search", arguments={"query": "who is it"}))
    assert result.observation.content.startswith('Doc 1(Title: "a useful document about')
    assert result.observation.content.count("\n") == 2  # topk = 3 documents
    assert fake_simulator.calls == [1]
    engine = env.tools[0].engine
    prompt = engine.build_prompt("who is it", task.prompt, task.answers, True)
    assert task.answers[0] in prompt and "three useful documents" in prompt
    # the same query of the same kind comes from the cache
    env.step(Action(kind="tool", name="search", arguments={"query": "who is it"}))
    assert fake_simulator.calls == [1] and engine.counts["cache_hits"] == 1


def test_the_searches_of_one_turn_are_generated_in_one_batch(fake_simulator):
    tasks = make_multihop_tasks("train", 4)
    envs = [ZeroSearchQAEnv(progress=1.0) for _ in tasks]
    for env, task in zip(envs, tasks, strict=True):
        env.reset(task, 0)
    actions = [Action(kind="tool", name="search", arguments={"query": t.prompt}) for t in tasks]
    waits = [env.start_step(a) for env, a in zip(envs, actions, strict=True)]
    assert fake_simulator.calls == []  # queued, not generated
    results = [wait() for wait in waits]
    assert fake_simulator.calls == [4]  # one generate call for the four searches
    assert all(r.observation.content.startswith("Doc 1(") for r in results)
    engine = envs[0].tools[0].engine
    assert engine.counts["useful"] + engine.counts["noisy"] == 4
    # a non-search action passes straight through
    answer = envs[0].start_step(Action(kind="answer", text=tasks[0].answers[0]))()
    assert answer.terminated and answer.reward == 1.0


def test_without_progress_the_env_uses_the_eval_engine(fake_simulator):
    env = ZeroSearchQAEnv()
    assert env.engine_kind == "bm25" and isinstance(env.tools[0], BM25Search)
    check_env(env, make_multihop_tasks("eval", 3))  # the expert's demos use the real engine
    simulated = ZeroSearchQAEnv(eval_engine="simulated", noise_end=0.4)
    assert isinstance(simulated.tools[0], SimulatedSearchTool)
    assert simulated.p_noisy == pytest.approx(0.4)  # the end of the curriculum


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"eval_engine": "google"}, "eval_engine"),
        ({"noise_end": 1.5}, "probabilities"),
        ({"topk": 6}, "topk"),
        ({"progress": 2.0}, "progress"),
        ({"noise_base": 1.0, "progress": 0.5}, "base"),
    ],
)
def test_bad_options(fake_simulator, kwargs, message):
    with pytest.raises(ValueError, match=message):
        ZeroSearchQAEnv(**kwargs)


def test_with_the_tiny_random_model_as_simulator():
    zs.shared_engine.cache_clear()
    env = ZeroSearchQAEnv(progress=0.5, simulator_model="tiny", simulator_max_new_tokens=8)
    env.reset(make_multihop_tasks("train", 1)[0], 0)
    result = env.step(Action(kind="tool", name="search", arguments={"query": "river"}))
    assert isinstance(result.observation.content, str) and result.info["tool_call"] == 1
    zs.shared_engine.cache_clear()


@pytest.mark.slow
def test_with_the_bundled_model_as_simulator():
    zs.shared_engine.cache_clear()
    task = make_multihop_tasks("train", 1)[0]
    env = ZeroSearchQAEnv(
        progress=0.0, simulator_max_new_tokens=64, doc_words=15, tool_timeout_s=120
    )
    env.reset(task, 0)
    query = task.fields["entity"]
    result = env.step(Action(kind="tool", name="search", arguments={"query": query}))
    assert result.info["tool_error"] == 0
    assert result.observation.content.startswith("Doc 1(Title: ")  # parsed generated documents
    zs.shared_engine.cache_clear()
