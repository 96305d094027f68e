"""Deprecated module path: the reusable sweeps are :mod:`jaxrank.studies` (for one release).

``jaxrank.experiments`` is :mod:`jaxrank.studies` itself (the same module
object). The experiment scripts' glue (``LABELS``, ``load_judge``,
``store_judge``) moved out of the package to ``experiments/_common.py``.
"""

import sys
import warnings

from jaxrank import studies

warnings.warn("jaxrank.experiments is deprecated and will be removed in the next release; use jaxrank.studies",
              DeprecationWarning, stacklevel=2)
sys.modules[__name__] = studies
