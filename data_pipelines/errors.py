"""Errors a user can cause: one readable line, never a traceback."""


class DataError(Exception):
    """Bad input (a file that is not the declared format, a bad mapping, a corrupt dataset).

    The CLI prints ``error: <message>`` and exits non-zero.
    """
