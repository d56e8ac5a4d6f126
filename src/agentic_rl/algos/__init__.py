"""Pure tensor math for RL on LLM agents: advantage estimators (`advantages.py`, chosen by name
in `estimators.py`), policy/value losses, KL penalties and loss aggregation (`losses.py`),
GiGPO step grouping (`gigpo.py`), batch filters (`filters.py`), off-policy corrections
(`offpolicy.py`), preference (DPO) losses (`preference.py`) and masked reductions
(`masked.py`). Import from those modules. Depends only on torch and the standard library
(see tests/algos/test_purity.py)."""
