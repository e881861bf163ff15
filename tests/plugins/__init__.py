"""Shared test fixtures and helpers, loaded for every test by ``pytest_plugins`` in
``tests/conftest.py``. Tests use the fixtures by name and import helpers from here, never
from another folder's ``conftest.py``.

- ``data``: the real datasets in ../shared/data (the Open Bandit logs ingested), and the tiny
  synthetic world.
- ``rewards``: fast reward-model settings and a published DICE version on the tiny world.
- ``envs``: the hand-made catalogue and reward models, and the tiny world's environment.
- ``policies``: fast policy-training settings and a registry with two trained policies.
- ``artefacts``: a registry in tmp_path and a helper that publishes a version without torch.
"""
