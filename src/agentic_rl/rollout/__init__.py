"""Rollouts: the multi-turn episode loop (`loop`), step-wise and budgeted variants, context
windows, thinking budgets; `formats/` holds the chat formats and action parsers."""
