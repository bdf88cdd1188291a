"""matplotlib as every servesim figure uses it: drawn off-screen (the Agg backend, so no
display is needed) and with text shown as written.

A figure's titles, legends and notes carry names the user chose (a scenario's name, a
request class, a trace's file name). matplotlib reads text between two dollar signs as
TeX math, so a run named ``cost_$1_$`` would stop a run with a parse error when its plot
is drawn; every plotting function runs under :func:`plain_text`, which turns that
reading off (servesim's own labels use no math text).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, TypeVar

F = TypeVar("F", bound=Callable[..., Any])


def pyplot() -> Any:
    """``matplotlib.pyplot``, on the Agg backend (imported on first use: the simulator
    itself never needs matplotlib)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plain_text(draw: F) -> F:
    """``draw`` (a function that makes and saves figures) run with matplotlib's math
    text off: every string its figures hold is drawn as written, dollar signs included."""

    @functools.wraps(draw)
    def plain(*args: Any, **kwargs: Any) -> Any:
        with pyplot().rc_context({"text.parse_math": False}):
            return draw(*args, **kwargs)

    return plain  # type: ignore[return-value]
