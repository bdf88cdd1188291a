"""Priors for what kernel tables do not measure, fitted on public end-to-end runs.

A server spends time its kernels do not: each step's scheduling, input preparation,
sampling bookkeeping and launches outside CUDA graphs (the ``step`` component's
``const_s`` and ``per_seq_s``), and per request the API server's parsing,
tokenisation, detokenisation and streaming (:class:`sim.cost.frontend.Frontend`). These
are fitted per framework on the dense rows of AIConfigurator's ``silicon_sample.csv``
(``servesim validate --silicon --fit-priors``, docs/validation.md) and kept in
``sim/data/priors.yaml`` with the rows they were fitted on and their errors; the
profile builder writes them into every profile it builds, named as priors. A
framework never fitted gets zeros, and its profiles say so.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from sim.configtools import is_number
from sim.errors import ServesimError
from sim.files import read_text

PRIORS_FILE = Path(__file__).parents[1] / "data" / "priors.yaml"
KEYS = ("step_const_s", "step_per_seq_s", "request_s", "per_prompt_token_s", "response_s",
        "jitter_s")


@dataclass(frozen=True)
class Priors:
    """One framework's priors (seconds; per sequence or per prompt token where named)
    and where they came from. ``request_s`` is the per-request latency of the engine's
    own API server under a plain benchmark client (what a shipped profile carries).
    ``aic_client_lengths`` and ``aic_request_s`` are not the server's: they describe the
    harness of AIConfigurator's own rows of this framework, how its client drew lengths
    ("ranged" or "exact") and its per-request latency (None: ``request_s``), fitted
    beside the priors (sim/validate/siliconfit.py) and used only to compare with those
    rows."""

    step_const_s: float = 0.0
    step_per_seq_s: float = 0.0
    request_s: float = 0.0
    per_prompt_token_s: float = 0.0
    response_s: float = 0.0
    jitter_s: float = 0.0
    source: str = "none fitted: zero"
    aic_client_lengths: str = "ranged"
    aic_request_s: float | None = None

    def for_collection(self, collection: str) -> Priors:
        """The priors for a run measured by ``collection`` (``aic`` or ``inferencex``,
        :attr:`sim.validate.siliconrows.Row.collection`): AIConfigurator's own harness has
        its own per-request latency (``aic_request_s``, when fitted apart)."""
        if collection == "aic" and self.aic_request_s is not None:
            return dataclasses.replace(self, request_s=self.aic_request_s)
        return self


REQUIRED = ("step_const_s", "step_per_seq_s", "request_s")
LENGTHS = ("ranged", "exact")


def _mapping(value: Any, path: Path, where: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        raise ServesimError(f"got {value!r}, expected a mapping", source=str(path), where=where)
    return value


def load_priors(path: Path = PRIORS_FILE) -> dict[str, Priors]:
    """Every framework's priors in ``path`` (none when the file does not exist); a
    malformed file is one error naming the key."""
    if not path.is_file():
        return {}
    text = read_text(path, "priors")
    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ServesimError(f"cannot read priors: {exc}", source=str(path)) from None
    frameworks = _mapping(_mapping(doc, path, "(top level)").get("frameworks") or {}, path,
                          "frameworks")
    out: dict[str, Priors] = {}
    for fw, entry in frameworks.items():
        where = f"frameworks.{fw}"
        values = _mapping(_mapping(entry, path, where).get("values"), path, f"{where}.values")
        for k in REQUIRED:
            if k not in values:
                raise ServesimError("required key is missing", source=str(path),
                                    where=f"{where}.values.{k}")
        got: dict[str, float] = {}
        for k in KEYS:
            v = values.get(k, 0.0)
            if not is_number(v) or not math.isfinite(v) or v < 0:
                raise ServesimError(f"got {v!r}, expected seconds >= 0", source=str(path),
                                    where=f"{where}.values.{k}")
            got[k] = float(v)
        lengths = entry.get("aic_client_lengths", "ranged")
        if lengths not in LENGTHS:
            raise ServesimError(f"got {lengths!r}; one of {', '.join(LENGTHS)}",
                                source=str(path), where=f"{where}.aic_client_lengths")
        aic = values.get("aic_request_s")
        if aic is not None and (not is_number(aic) or not math.isfinite(aic) or aic < 0):
            raise ServesimError(f"got {aic!r}, expected seconds >= 0", source=str(path),
                                where=f"{where}.values.aic_request_s")
        out[str(fw)] = Priors(**got, source=str(entry.get("source", "fitted")),
                              aic_client_lengths=lengths,
                              aic_request_s=None if aic is None else float(aic))
    return out


def framework_priors(framework: str, path: Path = PRIORS_FILE) -> Priors:
    """``framework``'s priors, zeros (said so in ``source``) when it was never fitted."""
    return load_priors(path).get(framework, Priors())
