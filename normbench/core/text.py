"""Text from untrusted files made safe for where it is shown.

A runs directory is untrusted input: a config comment or a norm's name can carry terminal
escape sequences (clear the screen, set the window title, forge an OSC 8 link) or markdown
that forges headings and raw HTML. Every stored string passes through here on its way out.
"""

from __future__ import annotations


def plain(text: str) -> str:
    """Stored text made safe for a terminal: control characters (escape sequences, carriage
    returns, bidirectional overrides) shown as escapes, never sent raw."""
    return "".join(
        c if c.isprintable() or c == " " else c.encode("unicode_escape").decode() for c in text
    )
