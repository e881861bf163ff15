"""PARPO: personalised agentic reinforcement learning for e-commerce.

Subpackages: ``algorithms`` (advantages, anchors, losses: pure tensor
functions in registries), ``cli`` (the ``parpo`` command, the top layer),
``presets`` (YAML configs). Import-light: nothing heavy at package import.
"""

__version__ = "0.1.0"

import reward_models  # noqa: E402, F401  (registers the ``reward`` kind that policies read)
from parpo import artefact_kind as _artefact_kind  # noqa: E402, F401  (registers the ``policy`` kind)
