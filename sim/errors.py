"""The one exception type users see: a single line naming the source, key or line, and value."""

from __future__ import annotations

import re

# Control characters as Python writes them in a string's repr (\n, \t, \x1b ...).
_ESCAPES = {c: repr(chr(c))[1:-1] for c in (*range(32), 127)}
# A quoted value (a string's repr, in either quotes) past LONG characters, shown as its
# first KEPT characters and its length: a 200,000-character value echoed whole had put
# the list of what is allowed at the end of a 200 KB line.
LONG, KEPT = 200, 60
_QUOTED = re.compile("|".join(rf"{q}(?:[^{q}\\\n]|\\.){{{LONG},}}{q}" for q in "'\""))


def _shortened(match: re.Match[str]) -> str:
    """A long quoted value cut to its first :data:`KEPT` characters, with its length."""
    text = match.group()
    return f"{text[:KEPT + 1]}\u2026{text[0]} ({len(text) - 2:,} characters)"


class ServesimError(Exception):
    """An error in the user's input or environment, printed as one line without a traceback.

    ``source`` is a file name (or ``<scenario>``), ``where`` a dotted key or ``line N``.
    """

    def __init__(self, message: str, source: str | None = None, where: str | None = None):
        self.message = message
        self.source = source
        self.where = where
        super().__init__(self.__str__())

    def __str__(self) -> str:
        # A key as a file spells it may hold a line break or a tab: shown escaped, as the
        # message's values are, so the error stays one line.
        where = self.where.translate(_ESCAPES) if self.where else self.where
        if where and len(where) > LONG:  # a key as long as a value may be (an unknown one)
            where = f"{where[:KEPT]}\u2026 ({len(where):,} characters)"
        parts = [p for p in (self.source, where) if p]
        return ": ".join([*parts, _QUOTED.sub(_shortened, self.message)])

    def located(self, source: str | None = None, prefix: str | None = None) -> ServesimError:
        """A copy with ``source`` filled in (if unset) and ``prefix`` prepended to the key."""
        where = self.where
        if prefix:
            where = f"{prefix}.{where}" if where else prefix
        return ServesimError(self.message, self.source or source, where)
