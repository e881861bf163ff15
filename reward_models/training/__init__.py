"""Lightning training of the stage-2 reward model (the only place pytorch_lightning is imported).

from reward_models.training import fit
result = fit(cfg, RewardData.load("data/ml", "intervened"), "runs/r1")
"""

from reward_models.training.datamodule import RewardDataModule, make_stream
from reward_models.training.fit import FitResult, fit, make_trainer
from reward_models.training.module import RewardModule, build_model
from reward_models.training.stream import TripleStream

__all__ = [
    "FitResult",
    "RewardDataModule",
    "RewardModule",
    "TripleStream",
    "build_model",
    "fit",
    "make_stream",
    "make_trainer",
]
