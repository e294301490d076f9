"""Redirect: ``normbench.norms`` moved to ``normbench.layers.norms`` in 0.3.0.

``from normbench.norms import make_norm`` was the documented way to build a norm, so it keeps
working; new code imports from ``normbench.api``.
"""

from normbench.layers.norms import *  # noqa: F403
from normbench.layers.norms import NORMS, Norm, make_norm  # noqa: F401  (named for readers)
