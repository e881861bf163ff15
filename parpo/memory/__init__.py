"""PSGM: the preference-aligned skill graph memory (issue 21, docs/memory.md)."""
