"""The BFCL envs on a small slice of BFCL's own data: BFCL's checkers give the rewards, the
splits cannot overlap, the multi-turn calls run on per-episode API instances and nothing but
the entry's API methods with literal arguments reaches BFCL's `eval`."""

from __future__ import annotations

import copy

import pytest

pytest.importorskip("bfcl_eval", reason="bfcl-eval is installed by make setup (--no-deps)")
pytest.importorskip("tree_sitter", reason="the bfcl extra: tree-sitter 0.21")

from agentic_rl.config.load import load_config  # noqa: E402
from agentic_rl.config.parse import ConfigError  # noqa: E402
from agentic_rl.envs.benchmarks import bfcl_data  # noqa: E402
from agentic_rl.envs.benchmarks.bfcl import BFCLEnv, opening_messages  # noqa: E402
from agentic_rl.envs.benchmarks.bfcl_calls import expert_calls  # noqa: E402
from agentic_rl.envs.benchmarks.bfcl_data import (  # noqa: E402
    MULTI_TURN,
    SINGLE_TURN_EVAL,
    SINGLE_TURN_TRAIN,
    entry,
    make_bfcl_multi_turn_tasks,
    make_bfcl_tasks,
    scenario_index,
    single_turn_expert,
    single_turn_verdict,
    user_text,
)
from agentic_rl.envs.benchmarks.bfcl_multi_turn import BFCLMultiTurnEnv, refusal  # noqa: E402
from agentic_rl.envs.check import check_env  # noqa: E402
from agentic_rl.envs.from_config import make_envs, make_tasks  # noqa: E402
from agentic_rl.envs.registry import make_env, task_generator  # noqa: E402
from agentic_rl.types import Action, Task  # noqa: E402


def answer(text: str) -> Action:
    return Action(kind="answer", text=text, raw=text)


def play(env, task: Task, replies) -> list:
    """Reset `env` on `task` and step the replies (a callable of the env, or texts) to the end."""
    env.reset(task, 0)
    results = []
    for _ in range(64):
        text = replies(env) if callable(replies) else replies[len(results)]
        results.append(env.step(answer(text)))
        if results[-1].terminated:
            return results
    raise AssertionError("the episode did not end")


# -- single-turn: BFCL's verdicts ------------------------------------------------------------


def test_simple_python_0_verdicts_are_bfcls():
    e = entry("simple_python_0")  # calculate_triangle_area(base=10, height=5), unit optional
    assert single_turn_verdict(e, "[calculate_triangle_area(base=10, height=5)]") == (True, "")
    assert single_turn_verdict(e, "calculate_triangle_area(base=10, height=5, unit='units')")[0]
    wrong = single_turn_verdict(e, "[calculate_triangle_area(base=10, height=6)]")
    assert wrong[0] is False and "value_error" in wrong[1]
    assert single_turn_verdict(e, "The area is 25.") == (False, "ast_decoder:decoder_failed")
    two = single_turn_verdict(e, "[calculate_triangle_area(base=10, height=5)] * 2")
    assert two[0] is False


def test_parallel_order_does_not_matter_and_count_does():
    e = entry("parallel_multiple_0")
    calls = expert_calls(bfcl_data.possible_answers("parallel_multiple")["parallel_multiple_0"])
    first, second = calls[1:-1].split("), ")
    assert single_turn_verdict(e, f"[{second}, {first})]")[0]  # unordered, as BFCL's checker
    assert not single_turn_verdict(e, f"[{first})]")[0]  # one call missing


def test_irrelevance_passes_on_no_call_only():
    e = entry("irrelevance_0")
    assert single_turn_verdict(e, "[]") == (True, "")
    assert single_turn_verdict(e, "None of the functions fit.")[0]
    name = e["function"][0]["name"]
    assert single_turn_verdict(e, f"[{name}()]") == (False, "irrelevance_error:decoder_success")


def test_java_replies_are_decoded_and_checked_as_java():
    """simple_java_25's `id` is a Java long: BFCL's Java type converter reads `42L` as 42 and a
    bare `42` as a string (a type error), which Python's decoder could not tell apart."""
    e = entry("simple_java_25")
    call = "SmsHomeRecommendSubjectController.updateSort"
    assert single_turn_verdict(e, f"[{call}(id=42L, sort=5)]") == (True, "")
    assert single_turn_verdict(e, f"[{call}(id=42, sort=5)]") == (False, "type_error:simple")
    assert single_turn_verdict(e, f"[{call}(id=43L, sort=5)]") == (False, "value_error:others")
    assert single_turn_verdict(e, f"[{call}(id=42L)]")[1] == (
        "simple_function_checker:missing_required"
    )


def test_javascript_replies_are_decoded_and_checked_as_javascript():
    e = entry("simple_javascript_0")  # validateUserInput(inputField: String, isComplete: Boolean)
    good = '[validateUserInput(inputField="userInputField", isComplete=true)]'
    assert single_turn_verdict(e, good) == (True, "")
    assert single_turn_verdict(e, good.replace("true", "false")) == (False, "value_error:others")
    assert single_turn_verdict(e, "[validateUserInput(inputField='other', isComplete=true)]")[
        1
    ] == ("value_error:string")


def test_the_checker_reads_the_docs_without_the_prompts_language_hints():
    """The prompt's Java docs say every parameter is a string (BFCL's hints); its checker reads
    the declared Java types, as BFCL's eval runner loads them."""
    prompted = entry("simple_java_25")["function"][0]["parameters"]["properties"]["id"]
    checked = bfcl_data.checker_functions("simple_java")["simple_java_25"][0]["parameters"]
    assert prompted["type"] == "string" and checked["properties"]["id"]["type"] == "long"


def test_java_and_javascript_tasks_are_scored_by_bfcls_checker_in_the_env():
    """A slice of each: the expert's reply (Java / JavaScript syntax) passes, a wrong call
    fails, and the episode reports the category's accuracy."""
    for category in ("simple_java", "simple_javascript"):
        tasks = make_bfcl_tasks("eval", 6, 0, eval_categories=[category])
        assert [t.fields["category"] for t in tasks] == [category] * 6
        env = BFCLEnv()
        for task in tasks:
            if task.fields.get("has_expert") is False:  # simple_java_1: a non-empty HashMap
                continue
            good = play(env, task, [task.answers[0]])[-1]
            assert good.reward == 1.0 and good.info[f"env/accuracy@{category}"] == 1.0
            bad = play(env, task, ["[not_a_function(x=1)]"])[-1]
            assert bad.reward == 0.0 and bad.info[f"env/accuracy@{category}"] == 0.0


def test_tasks_the_expert_cannot_pass_are_marked():
    tasks = make_bfcl_tasks("eval", 0, 0)
    marked = sorted(t.task_id for t in tasks if t.fields.get("has_expert") is False)
    assert len(marked) == 9 and "simple_java_1" in marked  # 2 Python, 7 Java (see bfcl.py)
    assert all(
        single_turn_verdict(entry(i), single_turn_expert(entry(i)))[0] is False for i in marked
    )


def test_bfcl_env_rewards_bfcls_verdict_per_category():
    tasks = make_bfcl_tasks("eval", 14, 0)
    assert [t.fields["category"] for t in tasks[:7]] == list(SINGLE_TURN_EVAL)
    assert tuple(bfcl_data.bfcl().utils.NON_LIVE_CATEGORY) == SINGLE_TURN_EVAL  # BFCL's, in order
    env = BFCLEnv()
    for task in tasks:
        if task.fields.get("has_expert") is False:
            continue
        good = play(env, task, [task.answers[0]])[-1]
        assert good.reward == 1.0 and good.info[f"env/accuracy@{task.fields['category']}"] == 1.0
        bad = play(env, task, ["[not_a_function(x=1)]"])[-1]
        assert bad.reward == 0.0 and bad.info["success"] == 0.0
    # a tagless turn of another chat format is read without its end-of-turn marker
    env.reset(tasks[0], 0)
    raw = tasks[0].answers[0] + "<|im_end|>"
    assert env.step(Action(kind="none", raw=raw)).reward == 1.0


def test_check_env_passes_on_both_splits():
    # the first 10 reported entries hold simple_java_1, whose answer no reply can pass
    skipped = check_env(make_env("bfcl"), task_generator("bfcl")("eval", 10, 0))
    assert skipped == ["expert succeeds on tasks marked has_expert=false (it has none)"]
    assert check_env(make_env("bfcl"), task_generator("bfcl")("train", 10, 0)) == []


# -- the splits ------------------------------------------------------------------------------


def test_single_turn_train_and_eval_never_overlap():
    train = make_bfcl_tasks("train", 0, 0)
    reported = make_bfcl_tasks("eval", 0, 0)
    assert len(reported) == 1390  # every entry of the seven reported categories
    assert {t.fields["category"] for t in train} == set(SINGLE_TURN_TRAIN)
    assert not {t.task_id for t in train} & {t.task_id for t in reported}
    train_texts = {user_text(entry(t.task_id)) for t in train}
    assert not train_texts & {user_text(entry(t.task_id)) for t in reported}


def test_multi_turn_train_scenarios_are_never_evaluated():
    train = make_bfcl_multi_turn_tasks("train", 0, 0)
    reported = make_bfcl_multi_turn_tasks("eval", 0, 0)
    assert len(train) == 4 * 40 and len(reported) == 4 * 160
    assert {t.fields["category"] for t in train} == set(MULTI_TURN)
    assert not {scenario_index(t.task_id) for t in train} & {
        scenario_index(t.task_id) for t in reported
    }
    assert len(make_bfcl_multi_turn_tasks("eval", 0, 0, train_fold_every=0)) == 800


@pytest.mark.parametrize(
    ("options", "match"),
    [
        ({"eval_categories": ["simple"]}, "simple, not one of these BFCL categories"),
        ({"eval_categories": ["java"]}, "simple_python, simple_java, simple_javascript"),
        ({"train_categories": ["simple_python"]}, "train_categories has simple_python"),
    ],
)
@pytest.mark.parametrize("split", ["train", "eval"])
def test_bad_categories_name_the_key_and_the_valid_ones_on_either_split(options, match, split):
    with pytest.raises(ConfigError, match=match):
        make_bfcl_tasks(split, 4, 0, **options)
    with pytest.raises(ConfigError, match="multi_turn_base, multi_turn_miss_func"):
        make_bfcl_multi_turn_tasks(split, 4, 0, eval_categories=["multi_turn"])


def test_a_bad_category_fails_when_the_run_makes_its_tasks():
    """From a recipe's config: the run's tasks are made before any model loads
    (train/setup.py), so a misspelt category stops it there, naming the valid ones."""
    cfg = load_config("bfcl", ["model.name=tiny", "env.options.eval_categories=[simple_jav]"])
    with pytest.raises(ConfigError, match="simple_jav, not one of .* simple_java"):
        make_tasks(cfg, "train")


def test_too_many_tasks_say_how_many_there_are():
    with pytest.raises(ConfigError, match="hold 240 entries"):
        make_bfcl_tasks("eval", 241, 0, eval_categories=["irrelevance"])
    with pytest.raises(ConfigError, match="train_fold_every=0 keeps no"):
        make_bfcl_multi_turn_tasks("train", 4, 0, train_fold_every=0)


# -- multi-turn ------------------------------------------------------------------------------


def test_multi_turn_expert_passes_and_silence_fails():
    tasks = make_bfcl_multi_turn_tasks("eval", 4, 0)  # one entry of each category
    env = BFCLMultiTurnEnv()
    for task in tasks:
        done = play(env, task, lambda e: e.expert_turn()[len("<answer>") : -len("</answer>")])
        assert done[-1].reward == 1.0, done[-1].info
        assert done[-1].info[f"env/accuracy@{task.fields['category']}"] == 1.0
        silent = play(env, task, lambda e: "[]")[-1]
        assert (
            silent.reward == 0.0
            and silent.info["bfcl_error"] == "multi_turn:empty_turn_model_response"
        )


def test_multi_turn_observations_are_tool_results_then_the_next_user_turn():
    task = make_bfcl_multi_turn_tasks("eval", 1, 0)[0]
    env = BFCLMultiTurnEnv()
    opening = env.reset(task, 0)
    assert (
        opening.messages[0]["role"] == "system" and "[func_name1(" in opening.messages[0]["content"]
    )
    result = env.step(answer("[pwd(), cd(folder='nowhere_xq')]"))
    assert result.observation.name == "tool" and not result.terminated
    assert "'name': 'pwd()'" in result.observation.content and result.info["tool_call"] == 2
    turn_two = env.step(answer("I am done."))
    assert turn_two.observation.name == "user"
    assert turn_two.observation.content == entry(task.task_id)["question"][1][0]["content"]


def test_parallel_episodes_of_one_entry_do_not_share_state():
    task = Task("multi_turn_base_1", "", [], {"category": "multi_turn_base"})
    a, b = BFCLMultiTurnEnv(), BFCLMultiTurnEnv()
    a.reset(task, 0)
    b.reset(task, 0)
    a.step(answer("[mkdir(dir_name='only_in_a')]"))
    assert "only_in_a" in a.step(answer("[ls()]")).observation.content
    assert "only_in_a" not in b.step(answer("[ls()]")).observation.content
    a.reset(task, 0)  # a new episode starts from the entry's initial state again
    assert "only_in_a" not in a.step(answer("[ls()]")).observation.content


def test_only_api_methods_with_literal_arguments_reach_bfcls_eval(tmp_path):
    methods = {"ls", "cd"}
    assert refusal("ls()", methods) is None and refusal("cd(folder='x')", methods) is None
    target = tmp_path / "written"
    assert refusal(f"open(file='{target}', mode='w')", methods) == "name 'open' is not defined"
    assert "literal" in refusal("cd(folder=open(file='x'))", methods)
    task = Task("multi_turn_base_1", "", [], {"category": "multi_turn_base"})
    env = BFCLMultiTurnEnv()
    env.reset(task, 0)
    result = env.step(answer(f"[open(file='{target}', mode='w'), ls(a={{'open': {{}}}})]"))
    assert not target.exists() and result.info["tool_error"] == 2
    assert env.decoded == [[]]  # neither is recorded, so BFCL's checker never runs them either


def test_check_env_passes_on_multi_turn():
    tasks = task_generator("bfcl_multi_turn")("eval", 4, 0)
    skipped = check_env(make_env("bfcl_multi_turn"), tasks)
    assert skipped == ["gold answer scores >= a wrong one (the tasks have no gold answers)"]


def test_every_step_before_the_verdict_reports_the_category_as_failed():
    """A turn or token budget can end an episode before BFCL's verdict: every earlier step
    reports the category's accuracy as 0, so a cut episode is a failure in its category's mean
    rather than missing from it (the rollout sums env metrics over steps; the recipe test runs
    a cut episode through the rollout); the verdict's step brings a passed entry to 1."""
    task = make_bfcl_multi_turn_tasks("eval", 1, 0)[0]
    key = f"env/accuracy@{task.fields['category']}"
    env = BFCLMultiTurnEnv()
    env.reset(task, 0)
    calls = env.step(answer("[pwd()]"))
    turn_ended = env.step(answer("[]"))
    invalid = env.step(Action(kind="tool", raw="<search>x</search>", error="not a call list"))
    assert [r.info[key] for r in (calls, turn_ended, invalid)] == [0.0, 0.0, 0.0]
    passed = play(env, task, lambda e: e.expert_turn()[len("<answer>") : -len("</answer>")])
    assert sum(r.info.get(key, 0.0) for r in passed) == 1.0
    single = make_bfcl_tasks("eval", 1, 0)[0]
    env = BFCLEnv()
    env.reset(single, 0)
    malformed = env.step(Action(kind="tool", raw="<search>x</search>", error="not a call list"))
    assert malformed.info[f"env/accuracy@{single.fields['category']}"] == 0.0


# -- function-doc formats (BFCL's prompt variants) --------------------------------------------


def test_json_docs_are_bfcls_own_system_prompt_exactly():
    """The default path writes the messages BFCL's prompting handler writes, for entries with
    and without a system message of their own, single- and multi-turn."""
    handler = bfcl_data.bfcl().handler
    ids = [
        t.task_id for t in make_bfcl_tasks("eval", 8, 0) + make_bfcl_multi_turn_tasks("eval", 4, 0)
    ]
    with_system = [
        i
        for c in SINGLE_TURN_TRAIN
        for i, e in bfcl_data.entries(c).items()
        if e["question"][0][0]["role"] == "system"
    ][:2]
    assert with_system, "BFCL's live data has entries with their own system message"
    for entry_id in ids + with_system:
        test_entry = entry(entry_id)
        turn = test_entry["question"][0]
        bfcls = handler.system_prompt_pre_processing_chat_model(
            copy.deepcopy(turn), test_entry["function"], entry_id
        )
        assert opening_messages(test_entry, turn) == [
            {"role": m["role"], "content": m["content"]} for m in bfcls
        ]


def test_python_docs_are_bfcls_python_variant_and_shorter():
    task = make_bfcl_multi_turn_tasks("eval", 1, 0)[0]
    test_entry = entry(task.task_id)
    json_prompt = BFCLMultiTurnEnv().reset(task, 0).messages[0]["content"]
    python_prompt = (
        BFCLMultiTurnEnv(function_doc_format="python").reset(task, 0).messages[0]["content"]
    )
    docs = bfcl_data.bfcl().handler.format_function_doc(test_entry["function"], "python")
    assert docs in python_prompt and docs not in json_prompt
    assert '"name": "cd"' in json_prompt and "# Function: cd" in python_prompt
    assert len(python_prompt) < 0.6 * len(json_prompt)
    # everything around the docs is BFCL's same prompt
    assert (
        python_prompt.split("# Function:")[0].split("python format")[0]
        == (json_prompt.split("json format")[0])
    )


def test_miss_func_held_out_docs_follow_the_doc_format():
    task = next(
        t
        for t in make_bfcl_multi_turn_tasks("eval", 8, 0)
        if t.fields["category"] == "multi_turn_miss_func"
    )
    held_out = entry(task.task_id)["missed_function"]
    turn = int(next(iter(held_out)))
    for doc_format, marker in (("json", "{'name': "), ("python", "# Function: ")):
        env = BFCLMultiTurnEnv(function_doc_format=doc_format)
        env.reset(task, 0)
        message = env._turn_messages(turn)[0]["content"]
        assert marker in message and message.endswith("What about now?")


def test_an_unknown_doc_format_is_refused_before_the_model_loads():
    """`train.setup.build` makes an env before it loads a model, so a bad option fails in
    seconds; the message names the option and BFCL's formats."""
    cfg = load_config("bfcl_multi_turn", ["env.options.function_doc_format=yaml"])
    with pytest.raises(ValueError, match=r"function_doc_format must be one of \('json', 'python'"):
        make_envs(cfg, 1)
    with pytest.raises(ValueError, match="function_doc_format must be one of"):
        BFCLEnv(function_doc_format="markdown")
