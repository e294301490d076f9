"""Text from untrusted files made safe for where it is shown.

A runs directory is untrusted input: a config comment or a norm's name can carry terminal
escape sequences (clear the screen, set the window title, forge an OSC 8 link) or markdown
that forges headings and raw HTML. Every stored string passes through here on its way out.
A run id shown where a terminal line has less room than it is shortened here too.
"""

from __future__ import annotations

import re


def plain(text: str) -> str:
    """Stored text made safe for a terminal: control characters (escape sequences, carriage
    returns, bidirectional overrides) shown as escapes, never sent raw."""
    if text.isprintable():  # the common case, checked in C: a listing shows 100,000 names
        return text
    return "".join(
        c if c.isprintable() or c == " " else c.encode("unicode_escape").decode() for c in text
    )


# What CommonMark and GitHub's tables read as markup inside a line: escapes, code spans,
# emphasis, links and images, heading closers, strikethrough, cell separators. (Punctuation
# that is markup only at the start of a line, list and block markers, never starts one here:
# every value follows a label or a cell separator, and newlines are neutralised.)
_MARKDOWN_PUNCTUATION = "\\`*_[]#~|"
# ``<`` opens raw HTML or an autolink only before a letter, ``/``, ``!`` or ``?``; ``&`` starts
# an entity only before a letter, a digit or ``#``; ``>`` without an opening ``<`` is markup
# only at the start of a line (a quote). Elsewhere they are text, and stay readable
# (``p < alpha``, ``val_acc >= 0.85``).
_HTML = {"<": "&lt;", ">": "&gt;", "&": "&amp;"}
_OPENS = {"<": re.compile(r"[A-Za-z/!?]"), "&": re.compile(r"[A-Za-z0-9#]")}


def escape_markdown(text: str) -> str:
    """Stored text made inert in markdown: terminal-safe first (``plain``: a newline becomes
    the two characters ``\\n``, so a value can never start a heading or end a table row), then
    every inline markup character backslash-escaped, and ``< > &`` written as HTML entities
    where they could start raw HTML, an entity, an autolink or a quote (no raw HTML, no
    entity, no autolink), as themselves elsewhere."""
    text = plain(text)
    out = []
    for i, c in enumerate(text):
        after = text[i + 1 : i + 2]
        if c in _OPENS and _OPENS[c].match(after) or (c == ">" and i == 0):
            out.append(_HTML[c])
        else:
            out.append(f"\\{c}" if c in _MARKDOWN_PUNCTUATION else c)
    return "".join(out)


def fitted_id(run_id: str, room: int) -> str:
    """``run_id`` in ``room`` characters, for a line that must fit a terminal (the live line,
    the plan of a sweep): whole, or its last whole parts after an ellipsis
    (``…fp32-b32-s0-35545803``: never a part cut in the middle; at least the hash), or
    nothing."""
    if len(run_id) <= room:
        return run_id
    parts = run_id.split("-")
    for start in range(1, len(parts)):
        tail = "-".join(parts[start:])
        if 1 + len(tail) <= room:
            return "…" + tail
    return ""
