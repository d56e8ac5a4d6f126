"""Sphinx roles in docstrings as code links on the docs site (a griffe extension).

The docstrings of `agentic_rl` name each other Sphinx-style, ``:func:`grpo_advantages` `` or
``:mod:`agentic_rl.algos.advantages` ``, which is what a reader of the source and `help()`
expects. mkdocstrings reads them as Google-style Markdown, where a role is not syntax, so the
API pages showed ``:func:`` as literal text before the name. This extension rewrites each role,
once the package is loaded, into the name as code linked to its entry on the site (an
*optional* autorefs link: where the object has no entry of its own, the name stays plain code
and the strict build does not fail). mkdocs.yml loads it as a mkdocstrings-python extension:

    extensions: [bench/docs_roles.py]
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import griffe

# :func:`name`, :py:func:`~pkg.mod.name`, :mod:`pkg.mod`, ... (a role, then one back-quoted target)
ROLE = re.compile(r":(?:py:)?(?:mod|func|class|meth|attr|data|obj|exc|const):`(~?)([\w.]+)`")


def roles_to_markdown(text: str, resolve: Callable[[str], str | None]) -> str:
    """``text`` with every Sphinx role replaced by its name as code, linked (optionally) to the
    object ``resolve(name)`` returns the full dotted path of; a leading ``~`` shows only the
    last part of the name, as Sphinx does."""

    def link(match: re.Match[str]) -> str:
        short, name = match.groups()
        shown = name.rsplit(".", 1)[-1] if short else name
        target = resolve(name)
        if target is None:
            return f"`{shown}`"
        return f'<autoref identifier="{target}" optional><code>{shown}</code></autoref>'

    return ROLE.sub(link, text)


def resolver(obj: griffe.Object) -> Callable[[str], str | None]:
    """How a name written in ``obj``'s docstring resolves: a dotted name is taken as written,
    a bare name is looked up in ``obj``'s module (an imported name to where it is defined)."""

    def resolve(name: str) -> str | None:
        if "." in name:
            return name
        module = obj.module
        if name not in module.members:
            return None
        member = module.members[name]
        try:
            return member.final_target.path if member.is_alias else member.path
        except (griffe.AliasResolutionError, griffe.CyclicAliasError):
            return member.path

    return resolve


class SphinxRoles(griffe.Extension):
    """Rewrite Sphinx roles in every docstring of a loaded package (see the module docstring)."""

    def on_package(self, *, pkg: griffe.Module, **kwargs: Any) -> None:
        """Every docstring is rewritten once the whole package is known (names resolve)."""
        for obj in _walk(pkg):
            if obj.docstring is not None and ":" in obj.docstring.value:
                obj.docstring.value = roles_to_markdown(obj.docstring.value, resolver(obj))


def _walk(obj: griffe.Object) -> list[griffe.Object]:
    """``obj`` and every object defined under it (aliases are skipped: their targets are
    walked where they are defined)."""
    found = [obj]
    for member in obj.members.values():
        if not member.is_alias:
            found += _walk(member)
    return found
