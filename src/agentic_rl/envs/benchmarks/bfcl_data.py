"""BFCL's data, its own checkers, and the train / eval splits of the BFCL envs.

Everything is read from the PyPI package `bfcl-eval` (the Berkeley Function Calling
Leaderboard): its test entries and possible answers (`bfcl_eval/data/`), its prompt builder, its
decoders (`model_handler/utils.py`: Python, and tree-sitter's Java and JavaScript grammars for
simple_java / simple_javascript), its AST checker (run with the category's language, as its eval
runner does) and its multi-turn checker with the executable API classes. Nothing here
re-implements a check. (BFCL's summary scores over categories: bfcl_score.py; the expert's
calls written as Python, Java or JavaScript source: bfcl_calls.py.)

The package is installed with `--no-deps` (its declared dependencies pull every vendor SDK and
another torch; `make setup` does it): the modules used here import on that install plus the
`bfcl` extra (tree-sitter 0.21 for the decoders, tenacity), except the AST checker, which imports
`constants.model_config` (every vendor SDK) only to read
`MODEL_CONFIG_MAPPING[model].underscore_to_dot`. `_load_ast_checker` loads a private copy of the
checker with that mapping answering False for every model (the package's own names are kept:
BFCL's prompting handlers never rename `a.b` to `a_b`), leaving the package's modules untouched.
`BFCL_PROJECT_ROOT` (where the package writes its result and lock folders at import) defaults
to the project's cache, not site-packages.

Splits, kept apart by construction (tests/envs/benchmarks/test_bfcl_env.py proves no overlap):
- single-turn: the reported categories are BFCL's non-live ones (simple_python, simple_java,
  simple_javascript, multiple, parallel, parallel_multiple, irrelevance); training uses the
  live ones (user-contributed
  questions with their own function docs), minus any entry whose user text equals a reported
  entry's.
- multi-turn: the four categories share their scenarios (entry k of miss_func, miss_param and
  long_context is a variant of multi_turn_base_k), so the split is by scenario index: every
  `train_fold_every`-th index (0, 5, 10, ... by default) is training data in all four
  categories and is never evaluated; the others are reported.
"""

from __future__ import annotations

import copy
import functools
import importlib
import importlib.util
import inspect
import json
import os
import random
import re
import sys
import types
from collections.abc import Sequence
from typing import Any, Literal

from agentic_rl.config.parse import ConfigError
from agentic_rl.envs.benchmarks.bfcl_calls import expert_calls, keyword_call
from agentic_rl.model.load import cache_root
from agentic_rl.types import Task

Split = Literal["train", "eval"]

SINGLE_TURN_EVAL = (
    "simple_python",
    "simple_java",
    "simple_javascript",
    "multiple",
    "parallel",
    "parallel_multiple",
    "irrelevance",
)
"""BFCL's non-live single-turn categories (its `NON_LIVE_CATEGORY`, in its order), which the
single-turn env reports on."""
LANGUAGES = {"simple_java": "java", "simple_javascript": "javascript"}
"""The categories whose calls are Java or JavaScript, by BFCL's language name (the values of its
`Language` and `ReturnFormat` enums); every other category is Python."""
SINGLE_TURN_TRAIN = (
    "live_simple",
    "live_multiple",
    "live_parallel",
    "live_parallel_multiple",
    "live_irrelevance",
)
"""BFCL's live categories the single-turn env trains on (live_relevance has no answers)."""
MULTI_TURN = (
    "multi_turn_base",
    "multi_turn_miss_func",
    "multi_turn_miss_param",
    "multi_turn_long_context",
)
MODEL_NAME = "agentic_rl"
"""The model name handed to BFCL's checkers (they key renaming and instance caches on it)."""
NO_CALL = "[]"
"""The expert's reply when no function fits: an empty call list, which BFCL reads as no call."""

_INSTALL = (
    "the BFCL envs need the bfcl-eval package: pip install --no-deps bfcl-eval==2026.3.23 "
    "and pip install 'agentic-rl[bfcl]' (make setup does both)"
)
_MODEL_CONFIG = "bfcl_eval.constants.model_config"
_AST_CHECKER = "bfcl_eval.eval_checker.ast_eval.ast_checker"


class _NoRenaming:
    """What the AST checker reads from a model's config: keep dotted function names."""

    underscore_to_dot = False


class _AnyModel(dict):  # type: ignore[type-arg]
    def __missing__(self, key: str) -> type[_NoRenaming]:
        return _NoRenaming


def _load_ast_checker() -> types.ModuleType:
    """A private copy of BFCL's `ast_checker` module whose model-config mapping never renames
    (see the module docstring); the real `model_config` is stubbed only while it loads, and
    only if it is not imported already."""
    spec = importlib.util.find_spec(_AST_CHECKER)
    if spec is None or spec.origin is None:
        raise ImportError(f"{_AST_CHECKER} not found")
    private = importlib.util.spec_from_file_location("agentic_rl_bfcl_ast_checker", spec.origin)
    assert private is not None and private.loader is not None
    module = importlib.util.module_from_spec(private)
    stubbed = _MODEL_CONFIG not in sys.modules
    if stubbed:
        stub = types.ModuleType(_MODEL_CONFIG)
        stub.MODEL_CONFIG_MAPPING = _AnyModel()  # type: ignore[attr-defined]
        sys.modules[_MODEL_CONFIG] = stub
    try:
        private.loader.exec_module(module)
    finally:
        if stubbed:
            del sys.modules[_MODEL_CONFIG]
    module.MODEL_CONFIG_MAPPING = _AnyModel()  # type: ignore[attr-defined]
    return module


@functools.cache
def bfcl() -> types.SimpleNamespace:
    """The bfcl_eval modules the envs use, imported once (ImportError naming the install)."""
    os.environ.setdefault("BFCL_PROJECT_ROOT", str(cache_root() / "bfcl"))
    try:
        from bfcl_eval import utils
        from bfcl_eval.constants import default_prompts, enums, executable_backend_config
        from bfcl_eval.eval_checker.multi_turn_eval import multi_turn_checker, multi_turn_utils
        from bfcl_eval.model_handler import utils as handler_utils

        checker = _load_ast_checker()
    except ImportError as err:
        raise ImportError(f"{_INSTALL} ({type(err).__name__}: {err})") from err
    return types.SimpleNamespace(
        utils=utils,
        handler=handler_utils,
        prompts=default_prompts,
        enums=enums,
        backend=executable_backend_config,
        ast_checker=checker.ast_checker,
        multi_turn=multi_turn_checker,
        execution=multi_turn_utils,
    )


# ---------------------------------------------------------------------------------------------
# Entries and possible answers
# ---------------------------------------------------------------------------------------------


def category_of(entry_id: str) -> str:
    """BFCL's category of an entry id: `simple_python_12` -> `simple_python`,
    `live_multiple_3-1-0` -> `live_multiple`."""
    return entry_id.rsplit("_", 1)[0]


@functools.cache
def entries(category: str) -> dict[str, dict[str, Any]]:
    """The category's test entries by id, in BFCL's order, as BFCL's own loader prepares them
    (language hints added, multi-turn function docs attached, held-out functions moved to
    `missed_function`). Shared: callers deep-copy what they change."""
    return {e["id"]: e for e in bfcl().utils.load_dataset_entry(category)}


@functools.cache
def possible_answers(category: str) -> dict[str, list[Any]]:
    """The category's possible answers (`ground_truth`) by entry id; empty for irrelevance
    categories, which have none."""
    if "irrelevance" in category:
        return {}
    return {a["id"]: a["ground_truth"] for a in bfcl().utils.load_ground_truth_entry(category)}


@functools.cache
def checker_functions(category: str) -> dict[str, list[dict[str, Any]]]:
    """The category's function docs by entry id as BFCL's eval runner hands them to its AST
    checker: loaded without the language hints the prompt carries. For Java and JavaScript
    those hints rewrite every parameter's type to "string" (the prompt asks for each value as
    source text), while the checker converts each decoded value by its declared Java or
    JavaScript type, so only the docs as the data holds them give BFCL's verdict."""
    loaded = bfcl().utils.load_dataset_entry(
        category, include_prereq=False, include_language_specific_hint=False
    )
    return {e["id"]: e["function"] for e in loaded}


def language_of(category: str) -> str:
    """BFCL's language of a category's calls: "java", "javascript" or "python"."""
    return LANGUAGES.get(category, "python")


def entry(entry_id: str) -> dict[str, Any]:
    """One test entry by id (KeyError naming it if BFCL has none)."""
    found = entries(category_of(entry_id)).get(entry_id)
    if found is None:
        raise KeyError(f"BFCL has no entry {entry_id!r}")
    return found


def user_text(test_entry: dict[str, Any]) -> str:
    """Every user message of an entry, normalised (lower case, single spaces): the fingerprint
    the splits compare."""
    words = " ".join(
        m["content"] for turn in test_entry["question"] for m in turn if m["role"] == "user"
    )
    return " ".join(words.lower().split())


# ---------------------------------------------------------------------------------------------
# Single-turn: BFCL's verdict on a reply, and the expert's reply from the possible answer
# ---------------------------------------------------------------------------------------------


def single_turn_verdict(test_entry: dict[str, Any], reply: str) -> tuple[bool, str]:
    """BFCL's verdict on a single-turn reply, as its eval runner reaches it for a prompting
    model: (passed, error type or ""). Irrelevance categories pass when the reply decodes to no
    call (or does not decode); the others decode the reply with BFCL's decoder, check its
    shape, then run BFCL's `ast_checker` against the possible answer."""
    lib = bfcl()
    category = category_of(test_entry["id"])
    language = language_of(category)
    try:
        decoded = lib.handler.default_decode_ast_prompting(
            reply, lib.enums.ReturnFormat(language), False
        )
    except Exception:  # BFCL counts any decoding failure as "no call"
        decoded = None
    if "irrelevance" in category:
        called = decoded is not None and not lib.utils.is_empty_output(decoded)
        return (not called, "irrelevance_error:decoder_success" if called else "")
    if decoded is None:
        return False, "ast_decoder:decoder_failed"
    if not lib.utils.is_function_calling_format_output(decoded):
        return False, "ast_decoder:decoder_wrong_output_format"
    answer = possible_answers(category)[test_entry["id"]]
    functions = checker_functions(category)[test_entry["id"]]
    try:
        result = lib.ast_checker(
            functions, decoded, answer, lib.enums.Language(language), category, MODEL_NAME
        )
    except Exception as err:  # noqa: BLE001 - a reply must not crash the rollout
        # BFCL's Java converter raises on a few declared types it does not implement (Set,
        # Hashtable, Queue); its runner would stop there. A reply it cannot check fails.
        return False, f"ast_checker:{type(err).__name__}"
    return bool(result["valid"]), "" if result["valid"] else str(result.get("error_type", ""))


def single_turn_expert(test_entry: dict[str, Any]) -> str:
    """The expert's reply to a single-turn entry (an empty call list for irrelevance)."""
    category = category_of(test_entry["id"])
    if "irrelevance" in category:
        return NO_CALL
    functions = checker_functions(category)[test_entry["id"]]
    answer = possible_answers(category)[test_entry["id"]]
    return expert_calls(answer, functions, language_of(category))


# ---------------------------------------------------------------------------------------------
# Multi-turn: the expert's turns, the ground truth in keyword form (what BFCL's decoder reads)
# ---------------------------------------------------------------------------------------------


@functools.cache
def method_parameters(class_name: str) -> dict[str, tuple[str, ...]]:
    """Parameter names (without self) of each public method of a BFCL API class."""
    module = importlib.import_module(bfcl().backend.CLASS_FILE_PATH_MAPPING[class_name])
    cls = getattr(module, class_name)
    return {
        name: tuple(p for p in inspect.signature(fn).parameters if p != "self")
        for name, fn in inspect.getmembers(cls, predicate=inspect.isfunction)
        if not name.startswith("_")
    }


def multi_turn_expert_turns(test_entry: dict[str, Any]) -> list[str]:
    """The expert's call list for each turn of a multi-turn entry, from its ground truth
    (`[]` for a turn that must call nothing)."""
    parameters: dict[str, tuple[str, ...]] = {}
    for class_name in test_entry["involved_classes"]:
        parameters.update(method_parameters(class_name))
    return [
        "[" + ", ".join(keyword_call(c, parameters) for c in turn) + "]"
        for turn in possible_answers(category_of(test_entry["id"]))[test_entry["id"]]
    ]


# ---------------------------------------------------------------------------------------------
# Splits and tasks
# ---------------------------------------------------------------------------------------------


def _check_categories(key: str, given: Sequence[str], valid: Sequence[str]) -> list[str]:
    if isinstance(given, str) or not given:
        raise ConfigError(f"env.options.{key} must be a non-empty list of BFCL categories")
    unknown = [c for c in given if c not in valid]
    if unknown:
        raise ConfigError(
            f"env.options.{key} has {', '.join(map(str, unknown))}, not one of these BFCL "
            f"categories: {', '.join(valid)}"
        )
    return list(dict.fromkeys(given))


def _round_robin(groups: list[list[str]]) -> list[str]:
    """Ids taken one from each group in turn, so any prefix mixes the groups evenly."""
    out = []
    for i in range(max((len(g) for g in groups), default=0)):
        out += [g[i] for g in groups if i < len(g)]
    return out


def _take(ids: list[str], n: int, what: str) -> list[str]:
    if n > len(ids):
        raise ConfigError(
            f"{what} hold {len(ids)} entries, fewer than the {n} tasks asked for: set "
            f"env.num_train_tasks / env.num_eval_tasks to at most {len(ids)}"
        )
    return ids[:n] if n > 0 else ids


@functools.cache
def reported_user_texts() -> frozenset[str]:
    """The user text of every entry of the reported single-turn categories."""
    return frozenset(user_text(e) for c in SINGLE_TURN_EVAL for e in entries(c).values())


def prompt_chars(test_entry: dict[str, Any]) -> int:
    """The length of an entry's function docs (as BFCL's prompt shows them, JSON indented by
    4) and messages, in characters: how long its prompt is, without a tokenizer."""
    messages = sum(len(m["content"]) for turn in test_entry["question"] for m in turn)
    return len(json.dumps(test_entry["function"], indent=4)) + messages


def single_turn_train_ids(category: str, max_prompt_chars: int = 0) -> list[str]:
    """Training entries of a live category: those whose user text no reported entry has (and,
    with `max_prompt_chars` > 0, whose prompt is at most that long)."""
    reported = reported_user_texts()
    return [
        i
        for i, e in entries(category).items()
        if user_text(e) not in reported
        and (max_prompt_chars <= 0 or prompt_chars(e) <= max_prompt_chars)
    ]


def _task(entry_id: str, answers: list[str], fields: dict[str, Any] | None = None) -> Task:
    test_entry = entry(entry_id)
    prompt = "\n".join(m["content"] for m in test_entry["question"][0] if m["role"] == "user")
    return Task(entry_id, prompt, answers, {"category": category_of(entry_id), **(fields or {})})


def _eval_task(entry_id: str) -> Task:
    """A reported single-turn task; marked `has_expert=False` (envs/base.py) when BFCL's checker
    rejects the expert's reply, so `check_env` does not demand it (9 of 1,390 entries: their
    possible answers accept no reply the expert can write). Training tasks are not marked: the
    warm start keeps only the demonstrations that pass, and it samples from the same list as
    before."""
    reply = single_turn_expert(entry(entry_id))
    passes = single_turn_verdict(entry(entry_id), reply)[0]
    return _task(entry_id, [reply], {} if passes else {"has_expert": False})


def make_bfcl_tasks(
    split: Split,
    n: int,
    seed: int,
    *,
    eval_categories: Sequence[str] = SINGLE_TURN_EVAL,
    train_categories: Sequence[str] = SINGLE_TURN_TRAIN,
    max_train_prompt_chars: int = 0,
) -> list[Task]:
    """Single-turn tasks. "eval": entries of `eval_categories` in BFCL's order, one category
    after the other in turn (n <= 0: all of them); "train": entries of the live
    `train_categories` (with `max_train_prompt_chars` > 0, only those whose function docs and
    question are at most that many characters: long prompts are slow on a CPU), shuffled by
    `seed` within each category, then taken in turn. Evaluation entries are never filtered.
    Each task's answer is the expert's reply (an accepted call list). Both category lists are
    checked whichever split is made, so a misspelt one fails as the run's tasks are made, before
    any model loads, naming the valid categories."""
    eval_cats = _check_categories("eval_categories", eval_categories, SINGLE_TURN_EVAL)
    train_cats = _check_categories("train_categories", train_categories, SINGLE_TURN_TRAIN)
    if split == "eval":
        cats = eval_cats
        groups = [list(entries(c)) for c in cats]
    else:
        cats = train_cats
        groups = []
        for i, c in enumerate(cats):
            ids = single_turn_train_ids(c, max_train_prompt_chars)
            random.Random(seed * 1000 + i).shuffle(ids)
            groups.append(ids)
    chosen = _take(_round_robin(groups), n, f"the BFCL {split} categories {', '.join(cats)}")
    if split == "eval":
        return [_eval_task(i) for i in chosen]
    return [_task(i, [single_turn_expert(entry(i))]) for i in chosen]


def scenario_index(entry_id: str) -> int:
    """The scenario number of a multi-turn entry (`multi_turn_miss_func_17` -> 17)."""
    return int(entry_id.rsplit("_", 1)[1])


def in_train_fold(entry_id: str, train_fold_every: int) -> bool:
    """Whether a multi-turn entry's scenario is training data (never evaluated)."""
    return train_fold_every > 0 and scenario_index(entry_id) % train_fold_every == 0


def make_bfcl_multi_turn_tasks(
    split: Split,
    n: int,
    seed: int,
    *,
    eval_categories: Sequence[str] = MULTI_TURN,
    train_fold_every: int = 5,
) -> list[Task]:
    """Multi-turn tasks. Scenario k is training data when k % train_fold_every == 0 (in every
    category), evaluation data otherwise. "eval": the other scenarios of `eval_categories` in
    BFCL's order, one category after the other in turn (n <= 0: all); "train": the training
    scenarios of all four categories, shuffled by `seed`. `train_fold_every=0` keeps no
    training data and evaluates every entry (for a model trained elsewhere)."""
    if train_fold_every < 0:
        raise ConfigError(f"env.options.train_fold_every must be >= 0, got {train_fold_every}")
    cats = _check_categories("eval_categories", eval_categories, MULTI_TURN)  # either split
    if split == "eval":
        groups = [[i for i in entries(c) if not in_train_fold(i, train_fold_every)] for c in cats]
        ids = _round_robin(groups)
    else:
        if train_fold_every == 0:
            raise ConfigError(
                "env.options.train_fold_every=0 keeps no BFCL multi-turn training data: "
                "set it to k > 0 (scenarios 0, k, 2k, ... are trained on, never evaluated)"
            )
        ids = [i for c in MULTI_TURN for i in entries(c) if in_train_fold(i, train_fold_every)]
        random.Random(seed).shuffle(ids)
    chosen = _take(ids, n, f"the BFCL multi-turn {split} split")
    return [_task(i, []) for i in chosen]


_SANITIZE = re.compile(r"[-./:]")


def instance_prefix(model_name: str) -> str:
    """How BFCL's executor names the cached API instances of `model_name` in its globals."""
    return _SANITIZE.sub("_", model_name)


def drop_instances(model_name: str) -> None:
    """Forget the API instances BFCL's executor cached for `model_name` (its own, its
    `_eval` and `_ground_truth_eval` ones): they live in the executor module's globals."""
    namespace = vars(bfcl().execution)
    prefix = instance_prefix(model_name) + "_"  # not another name that starts alike
    for key in [k for k in list(namespace) if k.startswith(prefix) and k.endswith("_instance")]:
        namespace.pop(key, None)


def fresh_entry(entry_id: str) -> dict[str, Any]:
    """A deep copy of an entry, safe to hand to BFCL's functions that mutate their input."""
    return copy.deepcopy(entry(entry_id))
