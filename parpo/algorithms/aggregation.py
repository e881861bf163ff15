"""Loss aggregation: token losses ``[B, T]`` -> one scalar, using *global* counts.

``n_tokens`` (masked tokens) and ``n_seqs`` (sequences) are the counts of the whole optimisation
batch, all-reduced across micro-batches and data-parallel ranks by the caller. Each function is
then a sum of per-sequence terms divided by a batch constant, so summing the losses of the
micro-batches (gradient accumulation) gives exactly the loss of the full batch, however it was
split or padded.

=========================  ==============================================  =====================
name                       formula                                         reference
=========================  ==============================================  =====================
``token-mean``             ``sum_{i,t} m l / n_tokens``                    DAPO, verl default
``seq-mean-token-mean``    ``sum_i (sum_t m l / |o_i|) / n_seqs``          GRPO (DeepSeekMath)
``seq-mean-token-sum``     ``sum_{i,t} m l / n_seqs``                      --
``seq-mean-token-sum-norm`` ``sum_{i,t} m l / (n_seqs * L)``, L = norm_len  verl
``dr_grpo``                same, ``norm_len`` required (generation budget)  Dr. GRPO
=========================  ==============================================  =====================

``|o_i|`` is the sequence's own masked length (sequences are never split across micro-batches).
For ``seq-mean-token-sum-norm`` without ``norm_len``, ``L`` is ``T`` (verl's behaviour); that
depends on padding, so micro-batches padded to different lengths give a different loss: set it.
"""

from __future__ import annotations

from typing import Protocol

from torch import Tensor

from parpo_core.names import NameRegistry

Count = int | float | Tensor


class AggregationFn(Protocol):
    def __call__(
        self, loss_mat: Tensor, mask: Tensor, *, n_tokens: Count, n_seqs: Count, norm_len: int | None = None
    ) -> Tensor: ...


AGGREGATIONS: NameRegistry[AggregationFn] = NameRegistry("loss aggregation")


def _masked(loss_mat: Tensor, mask: Tensor) -> Tensor:
    if loss_mat.shape != mask.shape:
        raise ValueError(f"loss {tuple(loss_mat.shape)} and mask {tuple(mask.shape)} differ")
    return loss_mat * mask.to(loss_mat.dtype)


@AGGREGATIONS.register("token-mean")
def token_mean(
    loss_mat: Tensor, mask: Tensor, *, n_tokens: Count, n_seqs: Count, norm_len: int | None = None
) -> Tensor:
    """Every token weighs the same: ``sum(mask * loss) / n_tokens``."""
    return _masked(loss_mat, mask).sum() / n_tokens


@AGGREGATIONS.register("seq-mean-token-mean")
def seq_mean_token_mean(
    loss_mat: Tensor, mask: Tensor, *, n_tokens: Count, n_seqs: Count, norm_len: int | None = None
) -> Tensor:
    """Every sequence weighs the same, tokens averaged inside it: ``sum_i mean_t(loss_i) / n_seqs``."""
    per_seq = _masked(loss_mat, mask).sum(-1) / mask.sum(-1).clamp_min(1).to(loss_mat.dtype)
    return per_seq.sum() / n_seqs


@AGGREGATIONS.register("seq-mean-token-sum")
def seq_mean_token_sum(
    loss_mat: Tensor, mask: Tensor, *, n_tokens: Count, n_seqs: Count, norm_len: int | None = None
) -> Tensor:
    """Token losses summed per sequence, averaged over sequences: ``sum(mask * loss) / n_seqs``."""
    return _masked(loss_mat, mask).sum() / n_seqs


@AGGREGATIONS.register("seq-mean-token-sum-norm")
def seq_mean_token_sum_norm(
    loss_mat: Tensor, mask: Tensor, *, n_tokens: Count, n_seqs: Count, norm_len: int | None = None
) -> Tensor:
    """``sum(mask * loss) / (n_seqs * L)`` with the constant ``L = norm_len`` (default ``T``)."""
    length = norm_len if norm_len is not None else loss_mat.shape[-1]
    return _masked(loss_mat, mask).sum() / (n_seqs * length)


@AGGREGATIONS.register("dr_grpo")
def dr_grpo(
    loss_mat: Tensor, mask: Tensor, *, n_tokens: Count, n_seqs: Count, norm_len: int | None = None
) -> Tensor:
    """Dr. GRPO (arXiv 2503.20783): ``sum(mask * loss) / (n_seqs * norm_len)`` with ``norm_len`` the
    constant generation budget, so long and short answers are not reweighted by ``1/|o_i|``."""
    if norm_len is None:
        raise ValueError("aggregation 'dr_grpo' needs LossConfig.norm_len (the generation budget in tokens)")
    return _masked(loss_mat, mask).sum() / (n_seqs * norm_len)
