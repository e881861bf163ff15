"""``NameRegistry``: the one name -> object table of the project, with a decorator to fill it
and a readable miss.

Every table of names a user can type (advantage estimators, losses, KL estimators,
aggregations, splits, adapters, discrepancies, OPE estimators, policy backends,
artefact kinds) is a ``NameRegistry``, so each rejects a duplicate name, suggests
a close one on a miss, and gives the CLI its list of choices.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from typing import Generic, TypeVar

from parpo_core.errors import UserError

T = TypeVar("T")


class UnknownName(UserError, KeyError):
    """A name that is not in its table: one line with the closest name and the known ones."""

    def __str__(self) -> str:  # KeyError would quote the message
        return str(self.args[0])


class NameRegistry(dict[str, T], Generic[T]):
    """A plain ``dict`` from name to object, plus ``register`` and a readable miss.

    >>> ADVANTAGES: NameRegistry[AdvantageFn] = NameRegistry("advantage estimator")
    >>> @ADVANTAGES.register("grpo")
    ... def grpo(...): ...

    Adding an estimator is adding a function; callers look it up by the name in their config.
    A miss raises ``UnknownName`` (a ``KeyError`` and a ``UserError``), e.g.
    ``unknown advantage estimator 'gdp' (did you mean 'gdpo'?); known: gdpo, grpo, parpo``.
    """

    def __init__(self, kind: str) -> None:
        super().__init__()
        self.kind = kind

    def register(self, name: str) -> Callable[[T], T]:
        def wrap(obj: T) -> T:
            self.add(name, obj)
            return obj

        return wrap

    def add(self, name: str, obj: T) -> T:
        """Register ``obj`` under ``name`` (for values that are not decorated definitions)."""
        if name in self:
            raise ValueError(f"{self.kind} {name!r} is already registered")
        self[name] = obj
        return obj

    def names(self) -> list[str]:
        """The registered names, sorted (e.g. a CLI option's choices)."""
        return sorted(self)

    def __missing__(self, name: str) -> T:
        close = difflib.get_close_matches(name, list(self), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise UnknownName(f"unknown {self.kind} {name!r}{hint}; known: {', '.join(sorted(self))}")
