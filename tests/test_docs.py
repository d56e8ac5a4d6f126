"""The docs: generated pages equal what bench/docs_tables.py makes of bench/results (numbers typed
once), every recipe has a page, the README stays a short guide, and the docs' code runs."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench"))

import docs_results  # noqa: E402  (bench/ is scripts, not a package)
import docs_tables  # noqa: E402
from docs_results import DocsSourceError  # noqa: E402


def test_generated_pages_equal_the_generator_output():
    files = docs_tables.generate()
    differ = [str(p.relative_to(ROOT)) for p, t in files.items() if docs_tables.differs(p, t)]
    assert not differ, f"out of date (run `make docs` and commit): {differ}"
    assert not docs_tables.stale_pages(files)


def test_every_page_of_a_source_folder_is_generated_from_its_source():
    assert "index.md" in {p.name for p in (ROOT / "docs" / "sources" / "benchmarks").glob("*.md")}
    for folder in docs_tables.PAGE_FOLDERS:
        for source in (ROOT / "docs" / "sources" / folder).glob("*.md"):
            page = ROOT / "docs" / folder / source.name
            assert docs_tables.is_generated(page), f"{page} is not generated from {source}"


def test_every_recipe_page_says_how_it_departs_from_its_paper():
    for name in docs_tables.recipe_names():
        text = (ROOT / "docs" / "recipes" / f"{name}.md").read_text()
        section = text.split(docs_tables.DEPARTURES, 1)
        assert len(section) == 2, f"{name}: no departures section"
        assert len(section[1].split("\n## ", 1)[0].strip()) > 80, f"{name}: an empty section"


def test_every_recipe_has_a_page():
    names = docs_tables.recipe_names()
    assert len(names) >= 40
    for name in names:
        assert (ROOT / "docs" / "recipes" / f"{name}.md").is_file(), name
    index = (ROOT / "docs" / "recipes" / "index.md").read_text()
    assert all(f"[`{n}`]({n}.md)" in index for n in names)


def test_readme_is_a_short_guide_whose_links_exist():
    text = (ROOT / "README.md").read_text()
    lines = text.splitlines()
    assert len(lines) <= 250
    assert max(len(line) for line in lines) <= 300
    for target in re.findall(r"\]\(([^)#\s]+)\)", text):
        if not target.startswith("http"):
            assert (ROOT / target).exists(), f"README links to a missing {target}"


# --- the number readers, by hand -------------------------------------------------------------


def test_lookup_walks_dicts_and_lists_and_names_what_is_missing():
    data = {"runs": [{"summary": {"after": {"success": 0.5}}}]}
    assert docs_results.lookup(data, "runs.0.summary.after.success") == 0.5
    assert docs_results.lookup(data, "runs.-1.summary.after.success") == 0.5
    with pytest.raises(KeyError, match="'before'"):
        docs_results.lookup(data, "runs.0.summary.before")
    with pytest.raises(KeyError, match="a list of 1"):
        docs_results.lookup(data, "runs.1")


def test_formats():
    assert docs_results.format_value(0.8333, "pct") == "83%"
    assert docs_results.format_value(0.125, "pct1") == "12.5%"
    assert docs_results.format_value(851.2, "min") == "14.2 min"
    assert docs_results.format_value(5217.7, "gib") == "5.1 GiB"
    assert docs_results.format_value(3.1415, "x") == "3.14x"
    assert docs_results.format_value(1234.4, "int") == "1,234"
    assert docs_results.format_value(0.25, None) == "0.25"
    assert docs_results.format_value(3151.5, "mgib2") == "3.08 GiB"
    assert docs_results.format_value(False, "onoff") == "off"
    with pytest.raises(KeyError, match="needs a number"):
        docs_results.format_value("grpo", "pct")


def test_references_are_filled_and_bad_ones_name_the_source():
    results = {"a.json": {"x": {"y": 0.5}, "algo": "grpo"}}
    text = "success [[a.json:x.y|pct]] with [[a.json:algo]]"
    assert docs_results.substitute(text, results.__getitem__, "s.md") == "success 50% with grpo"
    with pytest.raises(DocsSourceError, match=r"s\.md: \[\[a\.json:x\.z\]\]: no 'z'"):
        docs_results.substitute("[[a.json:x.z|pct]]", results.__getitem__, "s.md")
    with pytest.raises(DocsSourceError, match="s.md: .*format 'pc'"):
        docs_results.substitute("[[a.json:x.y|pc]]", results.__getitem__, "s.md")


def test_rows_table_one_row_per_item_and_dash_for_what_an_item_lacks():
    results = {"a.json": {"runs": [{"v": "x", "m": {"s": 0.5}}, {"v": "y"}]}, "b.json": [{"n": 3}]}
    text = "[[rows: a.json:runs|variant=v; success=m.s:pct]]\n[[rows: b.json|n=n:int]]"
    assert docs_results.substitute(text, results.__getitem__, "s.md").splitlines() == [
        "| variant | success |",
        "|---|---|",
        "| x | 50% |",
        "| y | - |",
        "| n |",
        "|---|",
        "| 3 |",
    ]
    named = {"c.json": {"r": {"warm pool, 1 worker": {"n": 2}}}}
    table = docs_results.substitute("[[rows: c.json:r|what=@key; n=n]]", named.__getitem__, "s")
    assert table.splitlines()[-1] == "| warm pool, 1 worker | 2 |"
    with pytest.raises(DocsSourceError, match=r"s\.md: \[\[rows: a\.json:nope\]\]"):
        docs_results.substitute("[[rows: a.json:nope|x=v]]", results.__getitem__, "s.md")


def _run(seed: int, after: float) -> dict:
    summary = {
        "steps": 3,
        "eval_tasks": 10,
        "before": {"success": 0.0},
        "warm_start": {"success": 0.5},
        "after": {"success": after},
    }
    return {"seed": seed, "summary": summary, "wall_seconds": 120.0}


def test_runs_headline_and_table_by_hand():
    data = {"command": "/x/.venv/bin/python bench/recipe_runs.py r", "runs": [_run(0, 0.7)]}
    assert docs_results.runs_headline(data, "r.json") == (
        "held-out success untrained 0% → warm start 50% → 3 RL steps 70% (10 tasks, 1 seed)"
    )
    two = {"command": "c", "runs": [_run(0, 0.7), _run(1, 0.6)]}
    assert "3 RL steps 70%/60% (10 tasks, 2 seeds)" in docs_results.runs_headline(two, "r")
    table = docs_results.runs_table(data, "r.json").splitlines()
    assert table[2] == "| 0 | before | 0% | - | - | - |"
    assert table[4] == "| 0 | after 3 RL steps | 70% | - | - | - |"
    assert table[-1].startswith("`.venv/bin/python bench/recipe_runs.py r` (r.json; 1 seed")


def test_runs_table_has_a_column_per_env_metric():
    """A benchmark's own numbers (BFCL's accuracy per category, a score) are columns: a
    subset metric in percent, another env metric as a number, '-' where a point lacks it."""
    run = _run(0, 0.5)
    run["summary"]["before"]["env/accuracy@simple"] = 0.0
    run["summary"]["after"] |= {"env/accuracy@simple": 0.25, "env/score": 42.5}
    table = docs_results.runs_table({"command": "c", "runs": [run]}, "r").splitlines()
    assert table[0].endswith("| `accuracy@simple` | `score` |")
    assert table[2] == "| 0 | before | 0% | - | - | - | 0% | - |"
    assert table[4] == "| 0 | after 3 RL steps | 50% | - | - | - | 25% | 42.50 |"


def test_staged_headline_names_the_stages():
    stages = {
        "sft": {"steps": 0, "eval_tasks": 4, "after": {"success": 0.25}},
        "rl": {"steps": 1, "eval_tasks": 4, "after": {"success": 0.5}},
    }
    data = {"command": "c", "runs": [{"seed": 0, "summary": {"stages": stages}}]}
    assert docs_results.runs_headline(data, "r") == (
        "held-out success sft 25% → rl (1 RL step) 50% (4 tasks, 1 seed)"
    )


def test_learning_headline_by_hand():
    seeds = [
        {"seed": 0, "before": 0.0, "warm_start": 0.5, "after_rl": 0.7},
        {"seed": 1, "before": 0.0, "warm_start": 0.6, "after_rl": 0.6},
    ]
    data = {
        "rl_steps": 60,
        "held_out_tasks": 100,
        "seeds": seeds,
        "rl_gain": {"mean": 0.1, "min": 0.0, "max": 0.2},
    }
    assert docs_results.learning_headline(data, "l") == (
        "held-out success 0% → 55% (warm start) → 65% (60 RL steps), mean of 2 seeds;"
        " RL gain +0 to +20 points"
    )
    assert "| 0 | 0% | 50% | 70% | +20 points |" in docs_results.learning_table(data, "l")


def test_families_table_applies_the_bar_by_hand():
    def seeds(*pairs):
        return [
            {"seed": i, "before": 0.0, "warm_start": w, "after_rl": a}
            for i, (w, a) in enumerate(pairs)
        ]

    files = {
        "met": {"recipe": "r1", "rl_steps": 30, "seeds": seeds((0.5, 0.6), (0.5, 0.7), (0.4, 0.5))},
        "flat": {
            "recipe": "r2",
            "rl_steps": 30,
            "seeds": seeds((0.5, 0.9), (0.5, 0.8), (0.5, 0.5)),
        },
        "small": {
            "recipe": "r3",
            "rl_steps": 30,
            "seeds": seeds((0.5, 0.59), (0.5, 0.6), (0.5, 0.6)),
        },
        "two": {
            "recipe": "r4",
            "rl_steps": 30,
            "seeds": seeds((0.1, 0.9), (0.1, 0.9)),
            "stopped": [{"seed": 2, "curve": [[0, 0.1]]}],  # never counted: its run was cut
        },
    }
    rows = [(k, files[k]["recipe"], "why") for k in files] + [("later", "r5", "uncalibrated")]
    table = docs_results.families_table(rows, files).splitlines()
    # gains +10, +20, +10: mean +13.3, every seed positive
    assert table[2].endswith(
        "| 47% (40% to 50%) | 60% (50% to 70%) | +13 points (+10 points to +20 points) | met |"
    )
    assert table[3].endswith("| not met (why) |")  # one seed's gain is 0: not every seed positive
    assert table[4].endswith("| not met (why) |")  # mean gain +9.7 points < +10
    assert table[5].endswith("| too few seeds (why) |")
    assert "| 2 x 30 steps (1 stopped early) |" in table[5]
    assert table[6] == "| `later` | `r5` | 0 | - | - | - | not run yet (uncalibrated) |"


def test_learning_table_has_a_mean_and_range_row_and_tolerates_no_warm_start():
    seeds = [
        {"seed": 0, "before": 0.1, "warm_start": None, "after_rl": 0.3},
        {"seed": 1, "before": 0.2, "warm_start": None, "after_rl": 0.2},
    ]
    data = {"rl_steps": 10, "held_out_tasks": 20, "seeds": seeds, "metric": "success"}
    table = docs_results.learning_table(data, "l")
    assert "| 0 | 10% | - | 30% | +20 points |" in table
    assert (
        "| mean of 2 (min-max) | 15% (10% to 20%) | - | 25% (20% to 30%)"
        " | +10 points (+0 points to +20 points) |"
    ) in table
    assert docs_results.learning_headline(data, "l") == (
        "held-out success 15% → 25% (10 RL steps), mean of 2 seeds"
    )


def test_departures_start_at_the_first_scaled_or_differences_sentence(tmp_path):
    (tmp_path / "recipes").mkdir()
    header = (
        "# X (a paper): the method <search> stops.\n# Faithful: the reward.\n"
        "# Scaled down for a CPU: 2 x 8 samples, `<tag>` kept; 5 * 3.\nalgo: {}\n# not header\n"
    )
    (tmp_path / "recipes" / "x.yaml").write_text(header)
    assert docs_tables.departures("x", tmp_path) == (
        "Scaled down for a CPU: 2 x 8 samples, `<tag>` kept; 5 \\* 3."
    )
    (tmp_path / "recipes" / "y.yaml").write_text("# Y: only what it does.\n")
    assert docs_tables.departures("y", tmp_path) is None
    assert docs_tables.header_prose("y", tmp_path) == "Y: only what it does."


def test_figures_link_the_copy_relative_to_the_page_and_name_a_missing_one(tmp_path):
    (tmp_path / "learning").mkdir()
    (tmp_path / "learning" / "k.png").write_bytes(b"png")
    page = docs_tables.PAGES / "r.md"
    text = docs_tables.figures("[[figure: learning/k.png|the curve]]", "s.md", tmp_path, page)
    assert text == "![the curve](../assets/results/learning/k.png)"
    readme = docs_tables.figures("[[figure: learning/k.png|c]]", "s.md", tmp_path, ROOT / "R.md")
    assert readme == "![c](docs/assets/results/learning/k.png)"
    assert docs_tables.assets(tmp_path) == {docs_tables.ASSETS / "learning" / "k.png": b"png"}
    with pytest.raises(DocsSourceError, match=r"s\.md: \[\[figure: gone\.png\]\]"):
        docs_tables.figures("[[figure: gone.png|c]]", "s.md", tmp_path, page)


def test_a_learning_file_gives_its_recipe_a_learning_section(tmp_path):
    (tmp_path / "learning").mkdir()
    (tmp_path / "learning" / "k.json").write_text('{"recipe": "r"}')
    (tmp_path / "learning" / "k.png").write_bytes(b"png")
    (tmp_path / "learning" / "other.json").write_text('{"recipe": "s"}')
    assert docs_tables.learning_files("r", tmp_path) == ["learning/k.json"]
    section = docs_tables.learning_section("r", tmp_path)
    assert section.startswith("## Learning\n")
    assert "[[learning: learning/k.json]]" in section
    assert "[[figure: learning/k.png|" in section
    assert docs_tables.learning_section("t", tmp_path) == ""
    # a file the page's own text already shows is not shown twice
    assert docs_tables.learning_section("r", tmp_path, "x [[learning: learning/k.json]]") == ""


def test_conditionals_follow_the_results_file(tmp_path):
    (tmp_path / "there.json").write_text("{}")
    text = "a [[if there.json]]yes[[else]]no[[end]] b [[if gone.json]]yes[[else]]no[[end]]"
    assert docs_tables.conditionals(text, tmp_path) == "a yes b no"


# --- the docs' code ---------------------------------------------------------------------------


def _hand_written_pages() -> list[Path]:
    pages = sorted((ROOT / "docs").rglob("*.md"))
    return [p for p in pages if "sources" not in p.parts and not _generated(p)]


def _generated(path: Path) -> bool:
    return "<!-- generated by bench/docs_tables.py" in path.read_text()[:200]


def _python_blocks(path: Path) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", path.read_text(), re.DOTALL | re.MULTILINE)


def test_every_python_block_in_the_docs_compiles():
    blocks = [(p, b) for p in _hand_written_pages() for b in _python_blocks(p)]
    assert blocks
    for path, block in blocks:
        compile(block, str(path), "exec")


def test_the_reward_function_of_the_guide_runs():
    (block,) = _python_blocks(ROOT / "docs" / "guides" / "reward-functions.md")
    namespace: dict = {}
    exec(block, namespace)
    fn = namespace["contains_answer"]
    assert fn(["It is Paris.", "Lyon"], answers=[["paris"], ["paris"]]) == [1.0, 0.0]


def test_included_files_exist_and_examples_are_run_by_the_tests():
    from test_examples import EXAMPLES

    included = []
    for path in sorted((ROOT / "docs").rglob("*.md")):
        included += re.findall(r'--8<-- "([^"]+)"', path.read_text())
    assert included
    for name in included:
        assert (ROOT / name).is_file(), name
        if name.startswith("examples/"):
            assert Path(name).name in EXAMPLES, f"{name} is included but not run by the tests"


def test_sphinx_roles_become_code_links_and_unknown_names_plain_code():
    import docs_roles

    known = {"grpo_advantages": "agentic_rl.algos.advantages.grpo_advantages"}
    text = ":func:`grpo_advantages` and :func:`~agentic_rl.algos.losses.kl_penalty`; :mod:`nope`"
    assert docs_roles.roles_to_markdown(text, lambda n: known.get(n, n if "." in n else None)) == (
        '<autoref identifier="agentic_rl.algos.advantages.grpo_advantages" optional>'
        "<code>grpo_advantages</code></autoref> and "
        '<autoref identifier="agentic_rl.algos.losses.kl_penalty" optional>'
        "<code>kl_penalty</code></autoref>; `nope`"
    )
    assert docs_roles.roles_to_markdown("a :ref: b `c`", lambda n: n) == "a :ref: b `c`"


def test_no_sphinx_role_is_left_in_the_algorithm_docstrings_after_the_extension():
    import docs_roles
    import griffe

    package = griffe.load("agentic_rl.algos", search_paths=[ROOT / "src"])
    docs_roles.SphinxRoles().on_package(pkg=package, loader=None)
    left = [
        obj.path
        for obj in docs_roles._walk(package)
        if obj.docstring is not None and docs_roles.ROLE.search(obj.docstring.value)
    ]
    assert not left
    losses = package["losses"]
    assert "<code>aggregate_loss</code>" in losses.docstring.value
