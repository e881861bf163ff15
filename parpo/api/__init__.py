"""The Python API: the platform's jobs as keyword-only functions, for scripts and notebooks (the
top layer, beside ``parpo.cli``, whose commands call the same code). docs/api.md documents it
and what is public: the names in ``__all__`` below.

    from parpo import api

    ds = api.synth(out="w/data", users=120, items=160)
    api.train_reward(data=ds.path, registry="w/REG", run_dir="w/runs/reward")
    api.train_policy(data=ds.path, registry="w/REG", run_dir="w/runs/policy")
    api.load_policy("w/REG").act([{"request_id": "r1", "user_id": "u0001", "k": 5}])

Heavy packages (torch, Lightning, polars) load when a function runs, not on import.
"""

from parpo.api.data import DataResult, ingest, synth
from parpo.api.evaluate import Recorded, Report, compare, evaluate_policy, ope, report
from parpo.api.serve import Policy, create_app, load_policy
from parpo.api.train import train_policy, train_reward

__all__ = [
    "DataResult",
    "Policy",
    "Recorded",
    "Report",
    "compare",
    "create_app",
    "evaluate_policy",
    "ingest",
    "load_policy",
    "ope",
    "report",
    "synth",
    "train_policy",
    "train_reward",
]
