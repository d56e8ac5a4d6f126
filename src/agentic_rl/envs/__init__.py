"""Environments, one folder per family.

The core sits here: the protocol (base.py) and its checker `check_env` (check.py), the registry of envs and task
generators by name, with plugins (registry.py), user task files (task_files.py), the trainer's
door in (from_config.py), and what several families share (discrete.py: named actions;
code_words.py: reserved vocabulary words as discrete codes; knowledge.py: KnownSelf's knowledge
tool). The families: search/, code/, math/, games/, worlds/, browser/, embodied/, memory/,
vision/, multiagent/ (several roles in one episode) and benchmarks/ (the field's real
benchmarks, scored by their own checkers).
"""
