"""Canonical interaction logs: schema, adapters, validation with quarantine, id maps, splits.

The bottom layer of PARPO: every other part reads data through this package,
never a raw format. Kept import-light (no polars at package import) so that
the CLI can start fast.
"""
