"""The expert's calls written as source text, on hand-written possible answers (no BFCL needed;
that BFCL's own decoders and checkers accept them is tested on its data in test_bfcl_env.py)."""

from __future__ import annotations

from agentic_rl.envs.benchmarks.bfcl_calls import expert_calls, keyword_call


def _doc(name: str, **types: dict[str, str]) -> list[dict]:
    return [{"name": name, "parameters": {"properties": types}}]


def test_expert_calls_pick_the_first_accepted_value_and_omit_optional_ones():
    truth = [{"f": {"a": ["", 3], "b": ["x", "y"], "c": [""], "d": [{"k": ["v", "w"], "o": [""]}]}}]
    assert expert_calls(truth) == "[f(a=3, b='x', d={'k': 'v'})]"


def test_java_values_follow_their_declared_types():
    doc = _doc(
        "f",
        n={"type": "long"},
        x={"type": "float"},
        s={"type": "String"},
        names={"type": "ArrayList", "items": {"type": "String"}},
        flags={"type": "Array", "items": {"type": "String"}},
        on={"type": "boolean"},
    )
    truth = [{"f": {"n": [5], "x": [1.5], "s": ["hi"], "names": [["a", "b"]],
                    "flags": [["-v", "x y"]], "on": [True]}}]  # fmt: skip
    assert expert_calls(truth, doc, "java") == (
        '[f(n=5L, x=1.5f, s="hi", names=new ArrayList<>(Arrays.asList("a", "b")), '
        'flags=new String[]{-v, "x y"}, on=true)]'
    )


def test_a_java_string_holding_source_is_written_as_source():
    doc = _doc("connect", addr={"type": "any"})
    truth = [{"connect": {"addr": ['new InetSocketAddress("1.2.3.4", 80)']}}]
    assert (
        expert_calls(truth, doc, "java") == '[connect(addr=new InetSocketAddress("1.2.3.4", 80))]'
    )


def test_javascript_values_follow_their_declared_types():
    doc = _doc(
        "g", n={"type": "Bigint"}, xs={"type": "array"}, d={"type": "dict"}, s={"type": "string"}
    )
    truth = [{"g": {"n": [3], "xs": [[1, "a"]], "d": [{"k": [True]}], "s": ["q"]}}]
    assert expert_calls(truth, doc, "javascript") == '[g(n=3n, xs=[1, "a"], d={k: true}, s="q")]'


def test_keyword_call_names_positional_arguments():
    params = {"sort": ("file_name",), "mv": ("source", "destination")}
    assert keyword_call("sort('a.txt')", params) == "sort(file_name='a.txt')"
    assert keyword_call("mv('a', destination='b')", params) == "mv(source='a', destination='b')"
