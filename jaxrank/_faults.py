"""The mark of an ordinary fault: an error a user meets in normal use, whose message says what to do.

:class:`Fault` is a mix-in base of the library's errors of that kind (a strict judge refusing a model that
does not answer with the labels, a store holding one key with two different records). The command line
(:func:`jaxrank.cli.main`) prints any ``Fault`` as one line and exits with status 1, never as a traceback;
in Python they are ordinary exceptions (each also a ``ValueError`` or the like). JAX-free: the command
line's start-up imports it.
"""

from __future__ import annotations

__all__ = ["Fault"]


class Fault(Exception):
    """Mix-in base of the errors that are ordinary faults (printed by the command line as one line)."""
