"""Synthetic e-commerce logs with known ground truth (the embedded default dataset).

Users have interest vectors, a conformity coefficient and observable features
correlated with their interest; items have latent vectors, categories,
attributes and prices. A popularity-driven logging policy shows slates in
rounds (rich get richer); responses follow interest + conformity * popularity +
noise through a click -> cart/fav -> buy funnel. ``write`` produces a canonical
dataset, ``uniform_test/`` (random exposure, same responses) and ``truth/``;
``write_continuation`` plays more rounds of a written world, with new users, new
items and interest drift (``drift``). See docs/synthetic.md.

    from data_pipelines.synth import SynthConfig, write, true_interest
    write(SynthConfig(seed=0), "data/synth")
    true_interest("data/synth", ["u0000"], ["i0000"])
"""

from data_pipelines.synth.config import GENERATOR_VERSION, SynthConfig
from data_pipelines.synth.drift import ContinueConfig
from data_pipelines.synth.exposure import gini
from data_pipelines.synth.generate import SynthData, generate
from data_pipelines.synth.truth import Truth, true_interest
from data_pipelines.synth.write import CSV_COLUMNS, write, write_continuation, write_csv

__all__ = [
    "CSV_COLUMNS",
    "ContinueConfig",
    "GENERATOR_VERSION",
    "SynthConfig",
    "SynthData",
    "Truth",
    "generate",
    "gini",
    "true_interest",
    "write",
    "write_continuation",
    "write_csv",
]
