"""Progress bars for calibration's phases, drawn by tqdm where it is installed.

calibrate/ must run where only torch, numpy, scipy and pyyaml are (scripts/gpu_check.sh
on a GPU machine), so tqdm is imported when a bar is asked for, and a bar that cannot
be drawn is a silent stand-in with the same three methods.
"""

from __future__ import annotations

import sys
from typing import Protocol


class Bar(Protocol):
    """What the phases call on a bar."""

    def update(self, n: int = 1) -> object:
        """Advance by ``n`` points."""

    def set_postfix_str(self, s: str) -> object:
        """Show ``s`` after the bar."""

    def close(self) -> object:
        """Finish the bar."""


class _Quiet:
    """A bar that draws nothing."""

    def update(self, n: int = 1) -> None:
        """Nothing to draw."""

    def set_postfix_str(self, s: str) -> None:
        """Nothing to draw."""

    def close(self) -> None:
        """Nothing to draw."""


def bar(total: int, desc: str, enabled: bool) -> Bar:
    """A bar over ``total`` points labelled ``desc`` on stderr (tqdm shows the rate and
    the time left); a quiet one when not ``enabled`` or when tqdm is not installed."""
    if not enabled:
        return _Quiet()
    try:
        from tqdm import tqdm
    except ImportError:
        print(f"{desc}: no progress bar (tqdm is not installed)", file=sys.stderr)
        return _Quiet()
    return tqdm(total=total, desc=desc, file=sys.stderr, unit="pt", dynamic_ncols=True)
