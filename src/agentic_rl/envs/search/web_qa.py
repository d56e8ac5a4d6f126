"""Web research on the two-hop QA world: `web_search` + `browse_webpage` (DeepResearcher, ASearcher).

DeepResearcher (Zheng et al. 2025) and ASearcher (Gao et al. 2025) give the agent a web search
(titles, URLs, snippets) and a browser whose reading step condenses a page to what bears on the
question (tools/web.py, tools/page_reader.py). Here the web is, by default, a local fake one
built from the multi-hop corpus (`fake_web_pages`): every document becomes an HTML page with site
chrome around the article (a script, a licence footer, navigation links), so a page is longer
than what matters and snippets are short, and answering needs both hops' pages. Real web access
goes through `HttpSearchProvider` only with `provider="http"`, an endpoint and `enable_web=true`
(or AGENTIC_RL_ENABLE_WEB=1); `web_cache` records or replays every search and fetch.

Rewards: the web schemes of envs/search/schemes.py, scored on the whole transcript and paid as
its change per turn (so the return is exactly the paper's score of the completion, also when
a turn budget cuts the episode):
- "deepresearcher": -1 if any turn is malformed (each turn: a <think> block, then exactly one
  tool call, or the final answer in the last turn) or no answer was given, else the answer's F1
  (rewards/search.py `deepresearcher_score`).
- "asearcher" / "asearcher_em": F1 (EM) of the answer times the product of the per-turn format
  flags, think optional (`asearcher_score`); a cut episode gets 0.
The rules read tag-format turns, so the env needs `rollout.chat_format=tags`.
"""

from __future__ import annotations

import os
import re
from functools import lru_cache
from html import escape
from typing import Literal

from agentic_rl.envs.search.multihop import BRIDGE_HINTS, MultiHopQAEnv, build_multihop_world
from agentic_rl.retrieval.qa_corpus import DEFAULT_NUM_ENTITIES
from agentic_rl.tools.page_reader import PageReader
from agentic_rl.tools.web import (
    ENABLE_ENV,
    CachedWebProvider,
    HttpSearchProvider,
    LocalFakeProvider,
    WebDisabledError,
    WebProvider,
    make_web_tools,
)

WebScheme = Literal["deepresearcher", "asearcher", "asearcher_em"]
WEB_SCHEMES = ("deepresearcher", "asearcher", "asearcher_em")
ProviderKind = Literal["local", "http"]
FAKE_WEB_URL = "https://wiki.local/"
_NAV = "Main page | Contents | Random article | About the wiki | Help | Donate"
_FOOTER = (
    "This page was last edited by a volunteer of the Local Wiki. Text is available under the "
    "Open Content License; additional terms may apply. Privacy policy | About | Disclaimers | "
    "Contact | Code of conduct | Cookie statement | Mobile view"
)

SYSTEM_PROMPT = (
    "Answer the question by researching the web. The question needs two facts: find the "
    "first, then look up the entity it names. Every turn, think inside <think> and </think>, "
    "then do exactly one of: search with <web_search>query</web_search>; open a result with "
    "<browse_webpage>URL</browse_webpage>; or give the final answer as <answer>answer</answer> "
    "with only the answer inside. Results and pages appear between <information> and "
    "</information>."
)


def fake_web_pages(corpus: list[dict[str, str]], base_url: str = FAKE_WEB_URL) -> dict[str, str]:
    """Search-R1 documents as HTML pages at base_url + id: the article after its title, then a
    script, a navigation bar and a licence footer, the chrome a reader has to see past."""
    pages = {}
    for doc in corpus:
        title, _, text = doc["contents"].partition("\n")
        title = escape(title.strip().strip('"'))
        pages[f"{base_url}{doc['id']}"] = (
            f"<html><head><title>{title}</title></head><body><h1>{title}</h1>"
            f"<p>{escape(text)}</p><script>var page = {doc['id']};</script>"
            f"<nav>{_NAV}</nav><footer><p>{_FOOTER}</p></footer></body></html>"
        )
    return pages


@lru_cache(maxsize=4)
def local_web(
    num_entities: int = DEFAULT_NUM_ENTITIES, corpus_seed: int = 0, snippet_chars: int = 80
) -> LocalFakeProvider:
    """The fake web of a two-hop world, built once per process (read-only but for its counters)."""
    world = build_multihop_world(num_entities, corpus_seed)
    return LocalFakeProvider(fake_web_pages(world.corpus), snippet_chars=snippet_chars)


@lru_cache(maxsize=4)
def _http_provider(
    endpoint: str, enabled: bool, results_path: str, api_key_env: str
) -> HttpSearchProvider:
    return HttpSearchProvider(
        endpoint, api_key_env=api_key_env, enabled=enabled, results_path=results_path
    )


def make_provider(
    provider: ProviderKind,
    *,
    num_entities: int = DEFAULT_NUM_ENTITIES,
    corpus_seed: int = 0,
    snippet_chars: int = 80,
    http_endpoint: str = "",
    enable_web: bool = False,
    http_results_path: str = "results",
    http_api_key_env: str = "AGENTIC_RL_WEB_API_KEY",
    web_cache: str = "",
    web_cache_mode: str = "record",
) -> WebProvider:
    """The configured provider. "http" needs an endpoint and explicit permission (else
    ValueError / WebDisabledError); a replay cache needs no provider at all."""
    if provider not in ("local", "http"):
        raise ValueError(f"provider must be 'local' or 'http', got {provider!r}")
    if provider == "local":
        if http_endpoint or enable_web:
            raise ValueError("http_endpoint / enable_web are set but provider is 'local'")
        base: WebProvider | None = local_web(num_entities, corpus_seed, snippet_chars)
    elif web_cache and web_cache_mode == "replay":
        base = None  # offline: every answer comes from the cache
    else:
        if not http_endpoint:
            raise ValueError(
                "provider='http' needs env.options.http_endpoint (the search API URL) and "
                "env.options.enable_web=true; real web access is off by default"
            )
        if not (enable_web or os.environ.get(ENABLE_ENV) == "1"):
            raise WebDisabledError(
                "provider='http' would reach the real web, which is off: set "
                f"env.options.enable_web=true (or {ENABLE_ENV}=1) to allow it"
            )
        base = _http_provider(http_endpoint, enable_web, http_results_path, http_api_key_env)
    if web_cache:
        return CachedWebProvider(base, web_cache, mode=web_cache_mode)  # type: ignore[arg-type]
    assert base is not None
    return base


def _think(text: str, action: str) -> str:
    return f"<think>{text}</think>{action}"


class WebQAEnv(MultiHopQAEnv):
    """Two-hop questions answered with `web_search` and `browse_webpage`; DeepResearcher's or
    ASearcher's reward (module docstring); the answer's EM is the `success` metric. Provider
    options as `make_provider`."""

    def __init__(
        self,
        num_entities: int = DEFAULT_NUM_ENTITIES,
        corpus_seed: int = 0,
        reward: WebScheme = "deepresearcher",
        tool_timeout_s: float = 10.0,
        max_tool_output_chars: int = 2000,
        search_k: int = 3,
        snippet_chars: int = 80,
        page_max_chars: int = 200,
        provider: ProviderKind = "local",
        http_endpoint: str = "",
        enable_web: bool = False,
        http_results_path: str = "results",
        http_api_key_env: str = "AGENTIC_RL_WEB_API_KEY",
        web_cache: str = "",
        web_cache_mode: str = "record",
    ) -> None:
        if reward not in WEB_SCHEMES:
            raise ValueError(f"reward must be one of {', '.join(WEB_SCHEMES)}, got {reward!r}")
        if search_k < 1 or page_max_chars < 20:
            raise ValueError("search_k must be >= 1 and page_max_chars >= 20")
        web = make_provider(
            provider,
            num_entities=num_entities,
            corpus_seed=corpus_seed,
            snippet_chars=snippet_chars,
            http_endpoint=http_endpoint,
            enable_web=enable_web,
            http_results_path=http_results_path,
            http_api_key_env=http_api_key_env,
            web_cache=web_cache,
            web_cache_mode=web_cache_mode,
        )
        reader = PageReader(max_chars=page_max_chars, chunk_chars=min(600, page_max_chars))
        # The scheme is the whole reward: no per-turn penalties besides its format rules.
        super().__init__(
            num_entities=num_entities,
            corpus_seed=corpus_seed,
            reward=reward,
            format_penalty=0.0,
            tool_timeout_s=tool_timeout_s,
            max_tool_output_chars=max_tool_output_chars,
            tools=make_web_tools(web, reader, k=search_k),
        )
        self.base_url = FAKE_WEB_URL

    def system_prompt(self) -> str:
        return SYSTEM_PROMPT

    def expert_turn(self) -> str:
        """Search the person, open their page, search the entity it names, open that page,
        answer; each turn starts with a short thought. Pages are opened only once a search
        result has listed them; after five searches the expert answers anyway."""
        assert self.task is not None, "expert_turn() before reset()"
        fields = self.task.fields
        entity, bridge, relation = fields["entity"], fields["bridge"], fields["relation"]
        person_url, bridge_url = (self.base_url + i for i in fields["support_doc_ids"])
        calls = [a for a, _ in self.history if a.kind == "tool"]
        searches = [a.arguments.get("query", "") for a in calls if a.name == "web_search"]
        opened = {a.arguments.get("url", "") for a in calls if a.name == "browse_webpage"}
        seen = "\n".join(obs.content for _, obs in self.history if obs is not None)

        def listed(url: str) -> bool:
            return re.search(re.escape(url) + r"(?!\w)", seen) is not None

        if len(searches) < 5:
            if person_url not in opened:
                if listed(person_url):
                    return _think(f"Read the page of {entity}.", self._browse(person_url))
                query = entity if not searches else f"{entity} person"
                return _think(f"First find out who {entity} is.", self._search(query))
            if bridge_url not in opened:
                if listed(bridge_url):
                    return _think(f"Now read the page of {bridge}.", self._browse(bridge_url))
                asked = any(bridge in query for query in searches)
                query = f"{bridge} {BRIDGE_HINTS[relation]}" if asked else bridge
                return _think(f"The page names {bridge}; look it up.", self._search(query))
        answer = self.task.answers[0]
        return _think(f"The page says {answer}.", f"<answer>{answer}</answer>")

    @staticmethod
    def _search(query: str) -> str:
        return f"<web_search>{query}</web_search>"

    @staticmethod
    def _browse(url: str) -> str:
        return f"<browse_webpage>{url}</browse_webpage>"
