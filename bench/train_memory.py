"""Peak resident memory of one training update on 16 sequences x 512 tokens (bundled model).

The issue's target: a training step with 16 x 512 tokens peaks at 4 GiB at most. Each variant
runs in its own child process (peak RSS is per process and never goes down): load the bundled
SmolLM2-135M (fp32), build a GRPO batch of 16 rows x 512 tokens (64 prompt + 448 response
tokens, mixed rewards so every row carries gradient), run one `learner.update` (AdamW, so the
optimizer state is allocated as in a real step), and report ru_maxrss. Memory does not depend
on machine load, so this is meaningful on a busy machine; the seconds printed are not.

    .venv/bin/python bench/train_memory.py                       # default variants
    .venv/bin/python bench/train_memory.py --variants 8:off 4:off 8:on

Writes bench/results/train_memory.json and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results"
ROWS, LENGTH, PROMPT = 16, 512, 64


def child(micro: int, checkpointing: bool, foreach: bool) -> dict[str, float]:
    import torch

    from agentic_rl.config.load import load_config
    from agentic_rl.learner.advantages import compute_advantages
    from agentic_rl.learner.batch import collate
    from agentic_rl.learner.update import update
    from agentic_rl.model.load import load_policy
    from agentic_rl.types import Trajectory

    cfg = load_config(
        None,
        [
            f"optim.micro_batch_size={micro}",
            f"model.gradient_checkpointing={str(checkpointing).lower()}",
            f"rollout.max_total_tokens={LENGTH}",
        ],
    )
    torch.manual_seed(0)
    policy, tokenizer = load_policy(cfg.model)
    loaded = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    g = torch.Generator().manual_seed(0)
    trajectories = [
        Trajectory(
            token_ids=torch.randint(100, 40000, (LENGTH,), generator=g).tolist(),
            loss_mask=[0] * PROMPT + [1] * (LENGTH - PROMPT),
            logprobs=[0.0] * LENGTH,
            prompt_length=PROMPT,
            turn_spans=[(PROMPT, LENGTH)],
            reward=float(i % 2),
            group_id=f"g{i // 8}",
        )
        for i in range(ROWS)
    ]
    batch = collate(trajectories, tokenizer.pad_token_id)
    compute_advantages(batch, cfg.algo)
    params = [p for p in policy.parameters() if p.requires_grad]
    # foreach=True (torch's CPU default) updates all tensors at once through temporaries the
    # size of the parameters; foreach=False goes tensor by tensor.
    optimizer = torch.optim.AdamW(params, lr=1e-6, foreach=foreach)
    start = time.perf_counter()
    update(policy, optimizer, batch, cfg)
    return {
        "micro_batch_size": micro,
        "gradient_checkpointing": checkpointing,
        "adamw_foreach": foreach,
        "rss_after_load_mib": loaded,
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "update_seconds": time.perf_counter() - start,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--variants",
        nargs="+",
        default=["8:off", "4:off", "8:on", "16:on", "4:on", "16:on:noforeach"],
        help="MICRO_BATCH:on|off (gradient checkpointing)[:noforeach (AdamW one tensor at a time)]",
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        micro, ckpt, *rest = args.child.split(":")
        print(json.dumps(child(int(micro), ckpt == "on", rest != ["noforeach"])))
        return
    rows = []
    for variant in args.variants:
        out = subprocess.run(
            [sys.executable, __file__, "--child", variant], capture_output=True, text=True
        )
        if out.returncode != 0:
            raise SystemExit(f"variant {variant} failed:\n{out.stderr[-3000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(rows[-1], flush=True)
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "train_memory.json").write_text(json.dumps(rows, indent=2))
    print(f"\n{ROWS} x {LENGTH} tokens, one GRPO update (AdamW), bundled model fp32\n")
    print("| micro-batch | grad. checkpointing | AdamW foreach | peak RSS GiB | after load GiB |")
    print("|---|---|---|---|---|")
    for r in rows:
        print(
            f"| {r['micro_batch_size']} | {'on' if r['gradient_checkpointing'] else 'off'} "
            f"| {'on' if r.get('adamw_foreach', True) else 'off'} "
            f"| {r['peak_rss_mib'] / 1024:.2f} | {r['rss_after_load_mib'] / 1024:.2f} |"
        )


if __name__ == "__main__":
    main()
