"""A name -> function mapping with a decorator to fill it and a readable miss."""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Generic, TypeVar

F = TypeVar("F", bound=Callable[..., object])


class Registry(dict[str, F], Generic[F]):
    """A plain ``dict`` from name to function, plus ``register`` and a readable ``KeyError``.

    >>> ADVANTAGES: Registry[AdvantageFn] = Registry("advantage estimator")
    >>> @ADVANTAGES.register("grpo")
    ... def grpo(...): ...

    Adding an estimator is adding a function; callers look it up by the name in their config.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[F], F]:
        def wrap(fn: F) -> F:
            if name in self:
                raise ValueError(f"{self.kind} {name!r} is already registered")
            self[name] = fn
            return fn

        return wrap

    def __missing__(self, name: str) -> F:
        close = difflib.get_close_matches(name, list(self), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise KeyError(f"unknown {self.kind} {name!r}{hint}; known: {', '.join(sorted(self))}")
