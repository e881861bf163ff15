"""PARPO: personalised agentic reinforcement learning for e-commerce.

Subpackages: ``algorithms`` (advantages, anchors, losses: pure tensor
functions in registries), ``cli`` (the ``parpo`` command, the top layer),
``presets`` (YAML configs). Import-light: nothing heavy at package import.
"""

__version__ = "0.1.0"
