"""The valid word a mistyped one most likely meant (``did you mean pre?``), for every error
that names a bad key, value, preset or filter.

difflib alone ranks by shared letters, so ``placement=prenorm`` was offered ``deepnorm``
(eight letters, five shared) rather than ``pre``, the word it starts with. A candidate that
the word starts with, or that starts with the word, is what a user who added or left out a
few letters meant: those come first, the longest shared start winning; difflib's closest (its
0.6 cutoff) otherwise.
"""

from __future__ import annotations

import difflib
from collections.abc import Iterable

SHORTEST_START = 2  # a shared start of one letter tells nothing


def closest(word: str, candidates: Iterable[str]) -> str | None:
    """The candidate ``word`` most likely meant, or None when none is close."""
    pool = [str(candidate) for candidate in candidates if candidate and candidate != word]
    starts = [
        candidate
        for candidate in pool
        if min(len(candidate), len(word)) >= SHORTEST_START
        and (word.startswith(candidate) or candidate.startswith(word))
    ]
    if starts:  # the longest shared start; then the nearest in length; then the first
        return max(starts, key=lambda c: (min(len(c), len(word)), -abs(len(c) - len(word))))
    close = difflib.get_close_matches(word, pool, n=1)
    return close[0] if close else None


def did_you_mean(word: str, candidates: Iterable[str]) -> str:
    """`` (did you mean norm?)`` when a candidate is close to ``word``, else ''."""
    close = closest(word, candidates)
    return f" (did you mean {close}?)" if close else ""
