"""DICE curriculum: the sampling margin and the cause-specific loss weights decay each epoch.

DICE (Zheng et al., WWW 2021) starts with a large popularity margin, so the
first epochs see only clear-cut conformity/interest evidence, and shrinks it
by ``margin_decay`` after every epoch; the interest and conformity loss
weights shrink by ``loss_decay`` likewise (the official code's ``adapt``).
Here each value is a pure function of the 0-based epoch number, so a resumed
run needs nothing but the epoch to get the same schedule:

    margin_t     = margin     * margin_decay ** t
    int_weight_t = int_weight * loss_decay ** t
    con_weight_t = con_weight * loss_decay ** t

Defaults are the official code's flags (margin 40, both decays 0.9, both
weights 0.1).
"""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["Curriculum", "CurriculumStep"]


@dataclass(frozen=True)
class CurriculumStep:
    """The schedule's values for one epoch."""

    epoch: int
    margin: float
    int_weight: float
    con_weight: float


@dataclass(frozen=True)
class Curriculum:
    """Initial values and per-epoch decay factors (decays in (0, 1]; 1 keeps a value constant)."""

    margin: float = 40.0
    margin_decay: float = 0.9
    int_weight: float = 0.1
    con_weight: float = 0.1
    loss_decay: float = 0.9

    def __post_init__(self) -> None:
        if self.margin < 0:
            raise ValueError(f"curriculum: margin={self.margin} must be >= 0")
        for name in ("margin_decay", "loss_decay"):
            v = getattr(self, name)
            if not 0.0 < v <= 1.0:
                raise ValueError(f"curriculum: {name}={v} must be in (0, 1]")

    def margin_at(self, epoch: int) -> float:
        return self.margin * self.margin_decay ** _epoch(epoch)

    def weights_at(self, epoch: int) -> tuple[float, float]:
        """(interest weight, conformity weight) for the epoch."""
        f = self.loss_decay ** _epoch(epoch)
        return self.int_weight * f, self.con_weight * f

    def at(self, epoch: int) -> CurriculumStep:
        w_int, w_con = self.weights_at(epoch)
        return CurriculumStep(epoch=epoch, margin=self.margin_at(epoch), int_weight=w_int, con_weight=w_con)


def _epoch(epoch: int) -> int:
    if epoch < 0:
        raise ValueError(f"curriculum: epoch={epoch} must be >= 0")
    return epoch
