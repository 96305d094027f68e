"""How the command line ends on a fault: one line on stderr, exit status 2 for usage, 1 for the rest.

**Usage (2)**: what the user wrote on the command line is wrong: an option's value, a combination of
options, or an input it names that does not exist or cannot be read as what it should be (a missing
``--data FILE`` or ``INPUT``, a missing column, a file that is not UTF-8), as argparse's own errors
and its ``FileType`` do. Raised as :class:`UsageError`.

**Failure (1)**: the command was right but could not be carried out: a model or data set that fails to
load, a store locked by another process or stored twice with different records, a full disk, a
folder that cannot be made. Raised as ``SystemExit("jaxrank: ...")``; an ``OSError`` that escapes a
command is caught in :func:`jaxrank.cli.main` and printed as one line, never as a traceback.
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
