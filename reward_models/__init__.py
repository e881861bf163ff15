"""Preference-disentangled reward models (stage 1 profile encoder, stage 2 interest/conformity).

Reads canonical datasets from ``data_pipelines``; published to the registry.
"""

from reward_models import artefact_kind as _artefact_kind  # noqa: F401  (registers the ``reward`` kind)
