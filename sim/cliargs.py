"""Command-line parsing shared by servesim's commands: :class:`ArgParser` (one line per
error naming the flag, an option given twice refused) and the typed flag readers
(:func:`int_arg`, :func:`float_arg`, :func:`comma_items`) that state their bounds.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
import typing
from typing import Any

from sim.errors import ServesimError


class _Once(argparse._StoreAction):
    """The plain ``store`` action, refusing a second value for its option: the last would
    otherwise win without a word (``--rates 2 --rates 4``). What each parse has seen is
    the parsing :class:`ArgParser`'s own (``_given``, cleared as a parse starts)."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace,
                 values: Any, option_string: str | None = None) -> None:
        given = getattr(parser, "_given", None)
        if self.option_strings and given is not None:
            shown = f"{option_string} " + (" ".join(map(str, values))
                                           if isinstance(values, list) else str(values))
            if self.dest in given:
                parser.error(f"{option_string} given twice ({given[self.dest]} and "
                             f"{shown}): it takes one value; give it once")
            given[self.dest] = shown
        super().__call__(parser, namespace, values, option_string)


class ArgParser(argparse.ArgumentParser):
    """:class:`argparse.ArgumentParser` whose errors (a missing argument, a value of the
    wrong type or out of its bounds) raise one :class:`ServesimError` line instead of
    printing the usage block and exiting."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._given: dict[str, str] = {}  # dest -> the option and value that first set it
        self.register("action", None, _Once)
        self.register("action", "store", _Once)

    # Any: argparse's own signature is a set of overloads on the namespace's type.
    def parse_known_args(self, args: Any = None, namespace: Any = None) -> Any:
        self._argv = list(sys.argv[1:] if args is None else args)  # for error()'s hints
        self._given = {}
        self._check_values(self._argv)
        return super().parse_known_args(args, namespace)

    def _check_values(self, argv: list[str]) -> None:
        """Refuse a flag's value of '--' or '' before argparse reads it: argparse drops a
        value of '--' (the end-of-flags marker) and hands the flag an empty list, which no
        flag reader expects, and an empty text reads as a path '.' or no items at all
        (a positional argument too: an empty scenario path was the folder '.')."""
        for i, arg in enumerate(argv):
            if arg == "--":
                return
            if arg == "":  # a flag's own empty value is named at the flag, below
                self.error("got an empty argument (''), where a file, folder or value "
                           "belongs")
            flag, eq, value = arg.partition("=")
            action = self._flag_action(flag) if arg.startswith("-") else None
            if action is None or action.nargs == 0:
                continue
            if eq and value == "--":
                self.error(f"{arg}: '--' is not a value for {flag}; it marks the end of "
                           "the flags")
            given = value if eq else argv[i + 1] if i + 1 < len(argv) else None
            if given == "":
                self.error(f"{flag}: got an empty value; give {flag} a value")

    def _flag_action(self, flag: str) -> argparse.Action | None:
        """The action ``flag`` names: its own, or the one flag it abbreviates (argparse
        takes a unique prefix of a long flag); None for no flag or an ambiguous prefix."""
        actions = self._option_string_actions
        if flag in actions:
            return actions[flag]
        found = {actions[s] for s in actions if flag.startswith("--") and s.startswith(flag)}
        return found.pop() if len(found) == 1 else None

    def error(self, message: str) -> typing.NoReturn:
        # "argument --tol: got 2, must be ..." reads "--tol 2: must be ...", as the
        # checks made after parsing word it.
        m = re.fullmatch(r"argument (\S+): got '?(.*?)'?, (.*)", message, re.S)
        if m is not None:
            message = f"{m[1]} {m[2]}: {m[3]}"
        m = re.fullmatch(r"argument (\S+): expected one argument", message)
        if m is not None:
            message = self._dash_value(m[1]) or message
        raise ServesimError(f"{message} (see {self.prog} --help)")

    def _dash_value(self, flags: str) -> str | None:
        """The hint for ``--rates -1,2``: argparse reads a value that begins with '-'
        (and is not a plain negative number) as a flag, and says only that ``--rates``
        (``flags``: its spellings, joined by '/') has no value. None when no such value
        follows it."""
        argv = getattr(self, "_argv", [])
        names = flags.split("/")
        for i, arg in enumerate(argv[:-1]):
            if arg in names and argv[i + 1] == "--":
                return f"{arg} --: '--' marks the end of the flags, so {arg} has no value"
            if arg in names and argv[i + 1].startswith("-"):
                return (f"{arg} {argv[i + 1]}: a value that begins with '-' reads as a "
                        f"flag; write it {arg}={argv[i + 1]}")
        return None


def _bound_text(gt: float | None, ge: float | None, lt: float | None,
                le: float | None) -> str:
    parts = [f"{word} {b:g}" for word, b in (("greater than", gt), ("at least", ge),
                                             ("less than", lt), ("at most", le))
             if b is not None]
    return " and ".join(parts)


def _in_bounds(v: float, gt: float | None, ge: float | None, lt: float | None,
               le: float | None) -> bool:
    return ((gt is None or v > gt) and (ge is None or v >= ge)
            and (lt is None or v < lt) and (le is None or v <= le))


def ascii_float(text: str) -> float:
    """``float(text)``, for ``text`` in ASCII alone (ValueError otherwise): ``float``
    also reads other scripts' digits (Arabic-Indic, full-width), which a flag more
    likely got by mistake than meant."""
    if not text.isascii():
        raise ValueError(text)
    return float(text)


def ascii_int(text: str) -> int:
    """``int(text)``, for ``text`` in ASCII alone (ValueError otherwise; as
    :func:`ascii_float`)."""
    if not text.isascii():
        raise ValueError(text)
    return int(text)


def int_arg(ge: int | None = None, le: int | None = None) -> typing.Callable[[str], int]:
    """An argparse ``type``: a whole number within [ge, le] (either may be None)."""
    def parse(text: str) -> int:
        try:
            v = ascii_int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected a whole number") from None
        if not _in_bounds(v, None, ge, None, le):
            raise argparse.ArgumentTypeError(f"got {v}, must be "
                                             f"{_bound_text(None, ge, None, le)}")
        return v
    return parse


def float_arg(gt: float | None = None, ge: float | None = None, lt: float | None = None,
              le: float | None = None) -> typing.Callable[[str], float]:
    """An argparse ``type``: a finite number within the given bounds."""
    def parse(text: str) -> float:
        try:
            v = ascii_float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"got {text!r}, expected a number") from None
        if not math.isfinite(v) or not _in_bounds(v, gt, ge, lt, le):
            bounds = _bound_text(gt, ge, lt, le)
            raise argparse.ArgumentTypeError(
                f"got {text}, must be a finite number{' ' + bounds if bounds else ''}")
        return v
    return parse


def comma_items(text: str, flag: str, allowed: str) -> list[str]:
    """The stripped items of the comma list ``text`` given to ``flag``. An empty item
    (``1,,2``, a trailing comma) is an error ending ``expected {allowed}`` rather than
    dropped: it is likelier a value left out than one meant to be skipped."""
    items = [x.strip() for x in text.split(",")]
    if any(not x for x in items):
        raise ServesimError(f"{flag} {text}: an empty item; expected {allowed}")
    return items
