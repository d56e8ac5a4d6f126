"""Tools the agent can call: the protocol and safe calling (`base`), and the built-in tools:
calculator, BM25 search, web search and page reading, sandboxed Python (`sandbox/`)."""
