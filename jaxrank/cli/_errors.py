"""How the command line ends on a fault: one line on stderr, exit status 2 for usage, 1 for the rest.

``raise UsageError("jaxrank: --contexts ...")`` for an option or argument that is wrong (exit 2, as
argparse's own usage errors); ``raise SystemExit("jaxrank: ...")`` for a file that cannot be read or
written, a data set that is not found, a model that fails to load (exit 1). An ``OSError`` that escapes a
command (a full disk, a folder that cannot be created) is caught in :func:`jaxrank.cli.main` and printed as
one line (exit 1), never as a traceback.
"""

from __future__ import annotations

import sys

__all__ = ["UsageError", "USAGE", "FAILURE"]

USAGE = 2
"""Exit status of a usage error (an option or argument that is wrong)."""
FAILURE = 1
"""Exit status of every other fault (input/output, a model or data set that cannot be read)."""


class UsageError(SystemExit):
    """An option or argument that is wrong: its message is printed on stderr and the exit status is 2."""

    def __init__(self, message: str):
        self.message = message if message.startswith("jaxrank") else f"jaxrank: {message}"
        super().__init__(self.message)
        self.code = USAGE                 # str(error) is the message; the interpreter exits with 2, silently

    def report(self) -> None:
        """Print the message (one line) on stderr."""
        print(self.message, file=sys.stderr)
