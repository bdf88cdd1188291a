"""Priors for what kernel tables do not measure, fitted on public end-to-end runs.

A server spends time its kernels do not: each step's scheduling, input preparation,
sampling bookkeeping and launches outside CUDA graphs (the ``step`` component's
``const_s`` and ``per_seq_s``), and per request the API server's parsing,
tokenisation, detokenisation and streaming (:class:`sim.frontend.Frontend`). These
are fitted per framework on the dense rows of AIConfigurator's ``silicon_sample.csv``
(``servesim validate --silicon --fit-priors``, docs/validation.md) and kept in
``sim/data/priors.yaml`` with the rows they were fitted on and their errors; the
profile builder writes them into every profile it builds, named as priors. A
framework never fitted gets zeros, and its profiles say so.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim.errors import ServesimError

PRIORS_FILE = Path(__file__).parent / "data" / "priors.yaml"
KEYS = ("step_const_s", "step_per_seq_s", "request_s", "per_prompt_token_s", "response_s",
        "jitter_s")


@dataclass(frozen=True)
class Priors:
    """One framework's priors (seconds; per sequence or per prompt token where named)
    and where they came from."""

    step_const_s: float = 0.0
    step_per_seq_s: float = 0.0
    request_s: float = 0.0
    per_prompt_token_s: float = 0.0
    response_s: float = 0.0
    jitter_s: float = 0.0
    source: str = "none fitted: zero"


def load_priors(path: Path = PRIORS_FILE) -> dict[str, Priors]:
    """Every framework's priors in ``path`` (none when the file does not exist)."""
    if not path.is_file():
        return {}
    try:
        doc = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ServesimError(f"cannot read priors: {exc}", source=str(path)) from None
    out: dict[str, Priors] = {}
    for fw, entry in (doc.get("frameworks") or {}).items():
        values: dict[str, Any] = entry.get("values") or {}
        missing = [k for k in KEYS[:3] if k not in values]
        if missing:
            raise ServesimError("required key is missing", source=str(path),
                                where=f"frameworks.{fw}.values.{missing[0]}")
        out[fw] = Priors(**{k: float(values.get(k, 0.0)) for k in KEYS},
                         source=str(entry.get("source", "fitted")))
    return out


def framework_priors(framework: str, path: Path = PRIORS_FILE) -> Priors:
    """``framework``'s priors, zeros (said so in ``source``) when it was never fitted."""
    return load_priors(path).get(framework, Priors())
