"""The registry's one error type: a user-facing, one-line message."""

from parpo_core.errors import UserError


class RegistryError(UserError):
    """A registry problem a user can cause or fix: an unknown version, a corrupted
    or incomplete version, a pointer with nothing to roll back to, a clashing eval."""
