"""Plain Hugging Face model directories: `save_hf_model` (the end of a run, a stage handing over to
the next) and `agentic-rl export CHECKPOINT --out DIR` (a training checkpoint as such a model).

Works on single-process checkpoints (io.py; a LoRA adapter is merged into the weights)
and on the sharded checkpoints of a torchrun run (sharded.py, read in this one process).
DIR gets config.json, the safetensors weights and the tokenizer (and a vision-language model's
processor files, from the directory it was loaded from); `model.name=DIR` loads it, in
training, evaluation or any transformers code. Where the run's settings are known, DIR also gets
what a user needs to prompt the model as it was trained (`write_usage`): generation_config.json
(the action tags as stop strings, the sampling settings), chat_example.json (the opening
messages of a held-out task) and README.md, a short model card (recipe, system prompt, chat
format, stop tags, a transformers snippet).

A run with a policy per role (model.role_policies adapters or models) is a team, not one model:
DIR gets a model directory per role, DIR/roles/<role>/ (a role's adapter merged into the base
weights, or its own model), and DIR/roles.json naming the roles, their directories and which of
them were trained (`save_policy`); a frozen role's directory holds what it played with, the
base model, so the whole team can be reassembled from DIR.
"""

from __future__ import annotations

import argparse
import copy
import json
from pathlib import Path
from typing import Any

from torch import nn

from agentic_rl.config.parse import ConfigError, build_dataclass
from agentic_rl.config.rollout import ModelConfig
from agentic_rl.config.schema import Config
from agentic_rl.model.roles import TEAM_MANIFEST, TEAM_ROLES_DIR


def resolve_checkpoint(path: Path) -> Path:
    """`path` itself if it is a complete checkpoint, else the latest one of run dir `path`."""
    from agentic_rl.checkpoint.layout import COMPLETE_MARKER, CheckpointError, latest_checkpoint

    path = Path(path)
    if (path / COMPLETE_MARKER).is_file():
        return path
    found = latest_checkpoint(path)
    if found is None:
        raise CheckpointError(f"{path} is neither a complete checkpoint nor a run dir with one")
    return found


def run_model_config(checkpoint: Path, model_name: str | None = None) -> ModelConfig:
    """The `model` settings of the run that wrote `checkpoint` (RUN/config.json, two levels
    up), with `model_name` replacing model.name when given."""
    config_file = checkpoint.parent.parent / "config.json"
    if config_file.is_file():
        cfg = build_dataclass(ModelConfig, json.loads(config_file.read_text())["model"], "model.")
    elif model_name is None:
        raise ConfigError(
            f"{config_file} (the run's settings) is missing: pass --model NAME, the model the "
            "run trained (its architecture and tokenizer)"
        )
    else:
        cfg = ModelConfig()
    if model_name is not None:
        cfg.name = model_name
    return cfg


def export_checkpoint(checkpoint: Path, out: Path, model_name: str | None = None) -> Path:
    """Write the policy of `checkpoint` (a checkpoint or run dir) to `out` as a Hugging Face
    model directory; returns `out`."""
    from agentic_rl.checkpoint.io import load_checkpoint
    from agentic_rl.checkpoint.layout import is_sharded
    from agentic_rl.checkpoint.sharded import load_full_policy
    from agentic_rl.config.validate_roles import env_roles
    from agentic_rl.model.roles import load_role_policies

    path = resolve_checkpoint(checkpoint)
    out = Path(out)
    if out.exists() and any(out.iterdir()):
        raise ConfigError(f"--out {out} exists and is not empty: choose a new directory")
    model_cfg, cfg = run_model_config(path, model_name), run_config(path)
    roles: tuple[str, ...] = ()
    if model_cfg.role_policies != "shared":  # the team as the run built it, then its weights
        if cfg is None:
            raise ConfigError(
                f"{path.parent.parent / 'config.json'} (the run's settings) is missing or "
                "unreadable: a run with a policy per role needs it to know its env's roles"
            )
        roles = env_roles(cfg.env.name, cfg.env.options)
    # the run's seed: the tiny test model's random weights (a LoRA run's base) are drawn from it
    policy, tokenizer = load_role_policies(
        model_cfg,
        roles,
        cfg.rollout.train_roles if cfg is not None else (),
        seed=cfg.trainer.seed if cfg is not None else 0,
    )
    if is_sharded(path):
        load_full_policy(path, policy)
    else:
        load_checkpoint(path, policy, restore_rng=False)
    return save_policy(policy, tokenizer, out, cfg, source=str(path))


def run_config(checkpoint: Path) -> Config | None:
    """The whole config of the run that wrote `checkpoint` (RUN/config.json), None without it."""
    config_file = checkpoint.parent.parent / "config.json"
    if not config_file.is_file():
        return None
    try:
        return build_dataclass(Config, json.loads(config_file.read_text()))
    except ConfigError:  # written by another version: the model card is left out
        return None


def _cmd_export(args: argparse.Namespace) -> int:
    checkpoint = resolve_checkpoint(Path(args.checkpoint))
    target = export_checkpoint(checkpoint, Path(args.out), args.model)
    print(f"exported {checkpoint} to {target}; train or evaluate it with model.name={target}")
    return 0


def add_export_command(sub: Any) -> None:
    export = sub.add_parser(
        "export", help="write a checkpoint (single-process or sharded) as a Hugging Face model dir"
    )
    export.add_argument("checkpoint", help="checkpoint dir (RUN/checkpoints/step_N) or run dir")
    export.add_argument("--out", required=True, help="new directory for the model")
    export.add_argument(
        "--model", help="model.name the run trained (default: from RUN/config.json)"
    )
    export.set_defaults(fn=_cmd_export)


def save_model(model: nn.Module, tokenizer: Any, out: Path, cfg: Config | None = None) -> Path:
    """Save a Hugging Face model directory that `model.name=OUT/model` loads (with the usage
    files of `write_usage` when the run's `cfg` is given)."""
    return save_policy(model, tokenizer, out / "model", cfg, source=str(out))


def save_policy(
    policy: nn.Module,
    tokenizer: Any,
    target: Path,
    cfg: Config | None = None,
    source: str = "",
) -> Path:
    """Write `policy` to `target` as what it is: one Hugging Face model directory
    (`save_hf_model`), or, with a policy per role, a model directory per role in
    TARGET/roles/<role>/ and the manifest TARGET/roles.json (module docstring). Each role is
    saved through `as_role`, the seam the run computed that role's tokens through, so the
    directory holds exactly the policy the role played with."""
    from agentic_rl.model.roles import RoleModels, as_role, role_policies, role_trains

    roles = role_policies(policy)
    if not roles:
        return save_hf_model(policy, tokenizer, target, cfg, source)
    entries = []
    for role in roles:
        with as_role(policy, role) as module:
            save_hf_model(module, tokenizer, target / TEAM_ROLES_DIR / role, cfg, source, role)
        trained = role_trains(policy, role)
        entries.append({"role": role, "path": f"{TEAM_ROLES_DIR}/{role}", "trained": trained})
    manifest = {
        "role_policies": "models" if isinstance(policy, RoleModels) else "adapters",
        "base_model": cfg.model.name if cfg is not None else None,
        "roles": entries,
        "note": "each path is a Hugging Face model directory (model.name=PATH loads it); a "
        "role with trained=false was not trained in this run and holds the base model",
    }
    (target / TEAM_MANIFEST).write_text(json.dumps(manifest, indent=2) + "\n")
    return target


def save_hf_model(
    model: nn.Module,
    tokenizer: Any,
    target: Path,
    cfg: Config | None = None,
    source: str = "",
    role: str | None = None,
) -> Path:
    """Write `target` as a plain Hugging Face model directory (config.json, safetensors
    weights, tokenizer) that `model.name=TARGET` loads; with the run's `cfg`, also how to
    prompt it (`write_usage`; `role`: the team role this model plays)."""
    from agentic_rl.model.lora import merged_copy
    from agentic_rl.model.vision import copy_processor_files

    merged = merged_copy(model)  # a LoRA policy: the active adapter folded into the weights
    merged.save_pretrained(target)
    tokenizer.save_pretrained(target)
    copy_processor_files(model, target)  # a vision-language policy: how it reads pictures
    if cfg is not None:
        generation = getattr(merged, "generation_config", None)
        write_usage(target, cfg, tokenizer, generation, source, role)
    return target


CHAT_EXAMPLE = "chat_example.json"


def write_usage(
    target: Path,
    cfg: Config,
    tokenizer: Any,
    generation: Any = None,
    source: str = "",
    role: str | None = None,
) -> None:
    """generation_config.json, chat_example.json and README.md (module docstring) in `target`:
    the prompt, stop tags and sampling the model was trained with, since a policy trained on
    tags stops at them and expects the env's observations after them. A team role's model
    (`role`) gets the opening messages only if its role opens the episode: the others'
    conversations are written by the env from what other roles said, which `reset` does not
    show."""
    from transformers import GenerationConfig

    from agentic_rl.envs.from_config import make_envs, make_tasks
    from agentic_rl.formats.registry import make_chat_format
    from agentic_rl.types import Observation

    small = copy.deepcopy(cfg)
    small.env.num_eval_tasks = 1
    try:  # the env (and its tools) as in training: a held-out task's opening messages
        env = make_envs(small, 1)[0]
        fmt = make_chat_format(cfg.rollout.chat_format, env.tools, tokenizer)
        first = env.reset(make_tasks(small, "eval")[0], seed=0)
        messages = first.messages if role in (None, first.role) else []
        tool = env.tools[0].name if env.tools else ""
        observation = fmt.render_observation(Observation(content="RESULT", name=tool))
    except Exception as err:  # noqa: BLE001 (user envs, missing data: the card says so)
        stop, messages, observation, problem = [], [], "", f"{type(err).__name__}: {err}"
    else:
        stop, problem = list(fmt.stop), ""
    rollout = cfg.rollout
    gen = copy.deepcopy(generation) if generation is not None else GenerationConfig()
    gen.eos_token_id = tokenizer.eos_token_id
    gen.pad_token_id = tokenizer.pad_token_id
    gen.max_new_tokens = rollout.max_tokens_per_turn
    gen.stop_strings = stop or None
    gen.do_sample = rollout.temperature > 0
    if gen.do_sample:
        gen.temperature, gen.top_p = rollout.temperature, rollout.top_p
    gen.save_pretrained(target)
    if messages:
        (target / CHAT_EXAMPLE).write_text(json.dumps(messages, indent=2) + "\n")
    (target / "README.md").write_text(
        model_card(cfg, messages, stop, observation, problem, source, role), encoding="utf-8"
    )


def model_card(
    cfg: Config,
    messages: list[dict[str, str]],
    stop: list[str],
    observation: str,
    problem: str = "",
    source: str = "",
    role: str | None = None,
) -> str:
    """README.md of an exported model: what it was trained for and how to prompt it (and, for
    a team role's model, which role it plays)."""
    system = next((m["content"] for m in messages if m["role"] == "system"), "")
    user = next((m["content"] for m in messages if m["role"] == "user"), "")
    fence = "```"
    lines = [
        f"# {cfg.recipe}: a policy trained with agentic-rl",
        "",
        cfg.description,
        "",
        f"- recipe: `{cfg.recipe}` (`agentic-rl train {cfg.recipe}`), env `{cfg.env.name}`, "
        f"algorithm `{cfg.algo.name}` (trainer.steps={cfg.trainer.steps}) from `{cfg.model.name}`",
        *([f"- exported from: `{source}`"] if source else []),
        *(
            [
                f"- role: `{role}`, one policy of a team (model.role_policies="
                f"{cfg.model.role_policies}); ../../{TEAM_MANIFEST} lists every role's model"
            ]
            if role
            else []
        ),
        f"- chat format: `{cfg.rollout.chat_format}`, rendered with the tokenizer's chat "
        "template (`apply_chat_template(messages, add_generation_prompt=True)`)",
        f"- stop tags: {', '.join(f'`{t}`' for t in stop) or 'none'} (generation_config.json "
        "`stop_strings`: pass `tokenizer=` to `generate` so it stops there)",
        f"- sampling in training: temperature {cfg.rollout.temperature}, up to "
        f"{cfg.rollout.max_tokens_per_turn} new tokens a turn, {cfg.rollout.max_turns} turns",
        "",
        "## How to prompt it",
        "",
        "Start the conversation as the env did in training: this system prompt, then the task as "
        f"the user message ({CHAT_EXAMPLE} holds a held-out example).",
        "",
    ]
    if problem:
        lines += [f"(The env could not be built while exporting, {problem}; see the recipe.)", ""]
    if role and not messages and not problem:
        lines += [
            f"The env opens `{role}`'s conversations from what the other roles said (env "
            f"`{cfg.env.name}`); prompt it with such a conversation.",
            "",
        ]
    if system:
        lines += ["System prompt:", "", f"{fence}text", system, fence, ""]
    if user:
        lines += ["User message, e.g.:", "", f"{fence}text", user, fence, ""]
    if observation:
        lines += [
            "When a turn ends at a tool's closing tag, run the tool and append its result to the "
            "assistant's text as the env did"
            + (", between blank lines" if observation.startswith("\n\n") else "")
            + ", e.g.:",
            "",
            f"{fence}text",
            observation.strip("\n"),
            fence,
            "",
            "then generate again; a turn with the answer tag ends the episode.",
            "",
        ]
    lines += [
        "## With transformers",
        "",
        f"{fence}python",
        "import json",
        "from transformers import AutoModelForCausalLM, AutoTokenizer",
        "",
        'model_dir = "PATH/TO/THIS/DIR"',
        "tokenizer = AutoTokenizer.from_pretrained(model_dir)",
        "model = AutoModelForCausalLM.from_pretrained(model_dir)",
        f'messages = json.load(open(f"{{model_dir}}/{CHAT_EXAMPLE}"))',
        "ids = tokenizer.apply_chat_template(",
        '    messages, add_generation_prompt=True, return_tensors="pt", return_dict=True',
        ')["input_ids"]',
        "out = model.generate(ids, tokenizer=tokenizer)  # stops at the tags above",
        "print(tokenizer.decode(out[0, ids.shape[1]:]))",
        fence,
        "",
        f"Or in agentic-rl: `agentic-rl train {cfg.recipe} model.name=PATH/TO/THIS/DIR` "
        "(training, evaluation), `agentic-rl serve-policy` (an OpenAI-compatible server).",
        "",
    ]
    return "\n".join(lines)
