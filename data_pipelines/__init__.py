"""Canonical interaction logs: schema, adapters, validation with quarantine, id maps, splits.

The bottom layer of PARPO: every other part reads data through this package,
never a raw format.
"""

from data_pipelines.schema import EVENTS, SCHEMA_VERSION

__all__ = ["EVENTS", "SCHEMA_VERSION"]
