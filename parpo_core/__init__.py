"""The shared core below every layer: what data pipelines, reward models, the PARPO library,
serving and the CLI all use, and nothing domain-specific.

- ``errors``: ``UserError`` (one readable line, never a traceback) and ``DataError``.
- ``config``: the strict frozen config base and the ``runtime.*`` keys.
- ``names``: ``NameRegistry``, the one name -> object table (estimators, losses, splits,
  adapters, policy backends, registry kinds...).
- ``durable``: atomic file writes, folder publishes, fsync and sha256 helpers.
- ``runs``: run folders and the handshake with DDP ranks a launcher starts.
- ``rng``: global RNG states as weights-only values (exact resume).
- ``artefacts``: the kind-agnostic artefact registry ``REG/<kind>/<version>/``.
- ``records``: the server's decision and event records (versioned models).
- ``limits``: bounds shared by the API and the ingest (timestamps, the id rule, prices).

Import-light: nothing here imports torch or polars at package import.
"""
