"""bench/int8_linear.py: each kernel computes the layer (errors ordered by precision), and the
bench runs end to end on the tiny model."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))

import int8_linear  # noqa: E402


def test_every_kernel_computes_the_layer_within_its_precision() -> None:
    weight = torch.randn(64, 32, generator=torch.Generator().manual_seed(0))
    results = int8_linear.measure(weight, rows=4, calls=1, repeats=1)
    assert results["fp32"]["rel_error"] == 0.0
    assert 0 < results["bf16"]["rel_error"] < 1e-2  # bfloat16: 8 bits of mantissa
    if "bf16_packed" in results:  # oneDNN packing is bit-equal to plain bf16's product order
        assert results["bf16_packed"]["rel_error"] < 1e-2
    for name in ("int8_weight_only", "int8_dynamic", "int8_int_mm"):
        if "rel_error" not in results[name]:
            pytest.skip(f"{name} unavailable in this torch build: {results[name]}")
        # per-channel int8 weights: ~1% error; a wrong scale or layout would be ~100%
        assert results["bf16"]["rel_error"] < results[name]["rel_error"] < 0.1, name
        assert results[name]["us"] > 0


def test_the_bench_runs_on_the_tiny_model(tmp_path: Path, monkeypatch) -> None:
    out = tmp_path / "int8.json"
    argv = ["int8_linear.py", "--model", "tiny", "--rows", "2", "--calls", "1", "--repeats", "1"]
    monkeypatch.setattr(sys, "argv", [*argv, "--threads", "1", "--out", str(out)])
    int8_linear.main()
    result = json.loads(out.read_text())
    assert "lm_head" in result["shapes"] and result["layers"] >= 1
    step = result["rows"]["2"]["step_linear_ms"]
    assert {"fp32", "bf16"} <= set(step) and all(ms > 0 for ms in step.values())
