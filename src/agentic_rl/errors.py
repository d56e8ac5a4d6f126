"""The one base of every error a user's own input can cause, so the command line can answer
each with one line instead of a traceback.

A recipe key, a task file row, a level file, a picture, a Gymnasium env id, a model directory:
whatever the user hands `agentic-rl` and the framework cannot use raises a subclass of
`UserInputError` (ConfigError, DatasetError, LevelError, GymTextError, ImageError,
EnvCheckError, ModelLoadError, ...), whose message names the file / row / key and says what to
do. `agentic_rl.cli.main` catches this base, prints the message and exits with code 2; any other
exception is a bug in the framework (or a user's own code) and keeps its traceback. Each
subclass also keeps its historical built-in base (ValueError, RuntimeError) so code that catches
those still does.
"""

from __future__ import annotations


class UserInputError(Exception):
    """Something the user gave cannot be used; the message names it and the way out."""
