"""Reward functions (TRL-shaped: `fn(completions, **task_fields) -> list[float]`), verifiers and
metrics: QA (`qa`), math (`math`), code (`code`), search (`search`, `search_format`,
`step_search`), tool use (`tool_use`), TTRL (`ttrl`), Absolute Zero (`absolute_zero`)."""
