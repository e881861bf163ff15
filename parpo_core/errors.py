"""Errors a user can cause: one readable line, never a traceback.

The CLI prints ``error: <message>`` and exits with status 1; the server maps
them to 4xx responses.
"""


class UserError(Exception):
    """Bad input from a user (a file, a flag, a config, a request)."""


class DataError(UserError):
    """Bad data: a file that is not the declared format, a bad mapping, a corrupt dataset."""
