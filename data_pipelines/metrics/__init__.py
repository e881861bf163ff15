"""Ranking, popularity-bias and correlation metrics shared by data, reward, policy and evaluation.

Numpy only (no torch, polars or scipy import): the lowest layer. See docs/metrics.md.

    from data_pipelines.metrics import csr_from_frame, evaluate_full_sort, bias_metrics

    exclude = csr_from_frame(pl.concat([train, valid]), n_users)   # masked at test
    truth = csr_from_frame(test, n_users)
    evaluate_full_sort(model.score_users, None, n_items, exclude, truth, ks=(10, 20, 50))
    # {"recall@10": ..., "recall@20": ..., ..., "precision@50": ...}
"""

from data_pipelines.metrics.bias import (
    BIAS_METRICS,
    HEAD_SHARE,
    bias_metrics,
    gini,
    head_mask,
    recommendation_counts,
)
from data_pipelines.metrics.correlation import (
    average_ranks,
    mean_user_spearman,
    per_user_spearman,
    sample_items_per_user,
    synthetic_spearman,
)
from data_pipelines.metrics.csr import (
    Csr,
    as_csr,
    csr_from_frame,
    csr_from_lists,
    csr_from_pairs,
    csr_rows,
)
from data_pipelines.metrics.ranking import (
    DEFAULT_KS,
    RANKING_METRICS,
    evaluate_full_sort,
    full_sort_topk,
    hit_matrix,
    per_user_ranking_metrics,
    ranking_metrics,
    topk_from_scores,
)

__all__ = [
    "BIAS_METRICS",
    "DEFAULT_KS",
    "HEAD_SHARE",
    "RANKING_METRICS",
    "Csr",
    "as_csr",
    "average_ranks",
    "bias_metrics",
    "csr_from_frame",
    "csr_from_lists",
    "csr_from_pairs",
    "csr_rows",
    "evaluate_full_sort",
    "full_sort_topk",
    "gini",
    "head_mask",
    "hit_matrix",
    "mean_user_spearman",
    "per_user_ranking_metrics",
    "per_user_spearman",
    "ranking_metrics",
    "recommendation_counts",
    "sample_items_per_user",
    "synthetic_spearman",
    "topk_from_scores",
]
