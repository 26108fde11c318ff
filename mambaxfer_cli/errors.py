"""The one exception family for user errors: the CLI prints its message and exits 2."""


class UserError(Exception):
    """Something the user asked for is wrong; the message says what and how to fix it."""
