"""The error every model-loading path raises (a missing model, tokenizer or extra), with a
message that says what to install or set."""

from __future__ import annotations

from agentic_rl.errors import UserInputError


class ModelLoadError(UserInputError, RuntimeError):
    """The model or tokenizer cannot be loaded; the message says what is missing."""
