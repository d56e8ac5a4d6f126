"""bench/cpu_limit.py: the step cost model by hand, and the machine measurements run."""

from __future__ import annotations

import sys
from pathlib import Path
from types import SimpleNamespace

import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

from cpu_limit import gemm_rate, memory_bandwidth, step_cost  # noqa: E402


def test_step_cost_by_hand() -> None:
    config = SimpleNamespace(
        hidden_size=8,
        num_attention_heads=2,  # head_dim 4
        num_key_value_heads=1,
        num_hidden_layers=2,
        vocab_size=10,
        tie_word_embeddings=True,
    )
    weights = [torch.zeros(60), torch.zeros(40)]  # 100 parameters
    model = SimpleNamespace(config=config, parameters=lambda: iter(weights))
    cost = step_cost(model, rows=2, context=3, bytes_per_weight=2)
    # weights 100 x 2 B; KV: K and V x 2 layers x 3 tokens x 1 head x 4 dims x 2 rows x 2 B = 192
    assert cost["bytes"] == 200 + 192
    # linears (tied head counted once): 2 x 100 x 2 rows; attention 4 x 2 x 3 x 8 x 2 rows
    assert cost["flops"] == 400 + 384
    untied = SimpleNamespace(
        config=SimpleNamespace(**{**vars(config), "tie_word_embeddings": False})
    )
    untied.parameters = lambda: iter(weights)
    # an untied input embedding (10 x 8) is a lookup: its 80 parameters do no GEMM work
    assert step_cost(untied, rows=2, context=3, bytes_per_weight=2)["flops"] == 2 * 20 * 2 + 384


def test_machine_measurements_are_positive() -> None:
    bandwidth = memory_bandwidth(mib=8, repeats=1)
    assert bandwidth["copy_gb_s"] > 0 and bandwidth["triad_gb_s"] > 0
    for dtype in (torch.float32, torch.bfloat16):
        assert gemm_rate((16, 32, 48), dtype, repeats=1, flop_per_timing=1e6) > 0
