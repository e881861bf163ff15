"""Tensors to and from safetensors files: never pickle, never ``torch.load``.

The only registry module that imports torch; the rest (listing, pointers,
verification) stays import-light for the CLI.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from parpo_core.artefacts.errors import RegistryError
from parpo_core.durable import atomic_write_with


def _plain(tensors: Mapping[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """Detached, contiguous CPU tensors, each with its own storage (safetensors refuses shared
    storage, e.g. tied embeddings: those are cloned)."""
    out: dict[str, torch.Tensor] = {}
    seen: set[tuple[int, int]] = set()
    for name, t in tensors.items():
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"weights[{name!r}] is a {type(t).__name__}, not a torch.Tensor")
        t = t.detach().to("cpu").contiguous()
        key = (t.untyped_storage().data_ptr(), t.untyped_storage().nbytes())
        if t.numel() and key in seen:
            t = t.clone()
        elif t.numel():
            seen.add(key)
        out[name] = t
    return out


def save_weights(
    tensors: Mapping[str, torch.Tensor],
    path: str | Path,
    metadata: Mapping[str, str] | None = None,
    *,
    durable: bool = True,
) -> Path:
    """Write ``tensors`` to a safetensors file at ``path``.

    With ``durable`` (default) the file is written under a temporary name,
    fsynced and renamed, so ``path`` is never half-written. ``metadata`` is the
    format's string-to-string header table.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    plain = _plain(tensors)
    meta = {str(k): str(v) for k, v in (metadata or {}).items()} or None
    if not durable:
        save_file(plain, str(path), metadata=meta)
        return path
    return atomic_write_with(path, lambda tmp: save_file(plain, str(tmp), metadata=meta))


def load_weights(path: str | Path, device: str = "cpu") -> dict[str, torch.Tensor]:
    """The tensors of a safetensors file, on ``device``; RegistryError for a missing or bad file."""
    path = Path(path)
    if not path.is_file():
        raise RegistryError(f"{path}: no such weights file")
    try:
        return load_file(str(path), device=device)
    except (SafetensorError, ValueError, OSError) as e:
        raise RegistryError(f"{path}: not a readable safetensors file ({e})") from None


def weights_metadata(path: str | Path) -> dict[str, str]:
    """The header metadata of a safetensors file, without reading the tensors."""
    from safetensors import safe_open

    try:
        with safe_open(str(path), framework="pt") as f:
            return dict(f.metadata() or {})
    except (SafetensorError, ValueError, OSError) as e:
        raise RegistryError(f"{path}: not a readable safetensors file ({e})") from None
