"""`agentic-rl report`: runs -> one self-contained HTML page to debug them with: curves,
evaluations, config and a token-level trajectory explorer (data.py reads a run directory,
html.py renders the page, assets/ holds its script and style)."""
