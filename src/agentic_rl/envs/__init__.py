"""Environments: the protocol and `check_env` (base.py), the registry of envs and task
generators by name, with plugins (registry.py), the built-in envs (one module each), user task
files (task_files.py) and the trainer's door in (from_config.py)."""
