"""The field's real benchmarks as environments, each scored by the benchmark's own checker
(BFCL: bfcl.py single-turn, bfcl_multi_turn.py multi-turn, bfcl_data.py their data and splits)."""
