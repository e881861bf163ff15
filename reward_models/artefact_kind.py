"""The ``reward`` artefact kind: registry versions of reward models, listed by their test metrics."""

from __future__ import annotations

from parpo_core.artefacts.kinds import KindSpec, metrics_json_section, register_kind

KIND = "reward"
#: The test-split ranking metrics a listing shows (``metrics.json["test"]``).
KEY_METRICS = ("ndcg@10", "recall@10", "hit@10", "mrr@10")

SPEC = register_kind(
    KindSpec(
        KIND,
        "reward models (DICE, MF, LightGCN; stage 1 profile encoder)",
        columns=KEY_METRICS,
        read_metrics=metrics_json_section("test", KEY_METRICS),
    )
)
