"""The one exception type users see: a single line naming the source, key or line, and value."""

from __future__ import annotations

# Control characters as Python writes them in a string's repr (\n, \t, \x1b ...).
_ESCAPES = {c: repr(chr(c))[1:-1] for c in (*range(32), 127)}


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
        parts = [p for p in (self.source, where) if p]
        return ": ".join([*parts, self.message])

    def located(self, source: str | None = None, prefix: str | None = None) -> ServesimError:
        """A copy with ``source`` filled in (if unset) and ``prefix`` prepended to the key."""
        where = self.where
        if prefix:
            where = f"{prefix}.{where}" if where else prefix
        return ServesimError(self.message, self.source or source, where)
