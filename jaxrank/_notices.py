"""Notices of other libraries that say nothing true of jaxrank, silenced while jaxrank uses them.

transformers, imported for its tokenizers by :mod:`jaxrank.models.loading`, logs on import
"PyTorch was not found. Models won't be available and only tokenizers, configuration and
file/data utilities can be used." where PyTorch is not installed: jaxrank's models are its own
(Flax), so the line misleads on every model command. :func:`quiet_torch_notice` drops exactly
that record (a :class:`logging.Filter` on the ``transformers`` logger, matched by the start of the
message) for the duration of a ``with`` block and removes the filter on exit; every other
transformers message, and its verbosity, environment and handlers, are left as they are. The
command line wraps every model command in it, and :mod:`jaxrank.models` wraps its own imports of
transformers, so ``load_model`` in a notebook does not print it either. JAX-free (the command line's
start-up imports it).
"""

from __future__ import annotations

import contextlib
import logging

TORCH_NOTICE = "PyTorch was not found. Models won't be available"
"""The start of the message that is dropped."""


class _DropTorchNotice(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith(TORCH_NOTICE)


@contextlib.contextmanager
def quiet_torch_notice():
    """Drop transformers' "PyTorch was not found" notice inside the block (the filter is removed after)."""
    logger = logging.getLogger("transformers")
    quiet = _DropTorchNotice()
    logger.addFilter(quiet)
    try:
        yield
    finally:
        logger.removeFilter(quiet)
