"""Read the JSON that ``vllm bench serve --save-result --save-detailed`` writes.

Per request it holds ``input_lens`` and ``output_lens`` (tokens), ``ttfts`` (seconds)
and ``itls`` (seconds between streamed chunks), plus ``errors``; run facts such as
``request_rate`` (a number, or ``"inf"``), ``burstiness``, ``max_concurrency``,
``num_prompts``, ``duration`` and ``completed``; and aggregates in milliseconds
(``median_ttft_ms`` ...). From these: E2E = TTFT + Σ ITL, and TPOT = Σ ITL / (output − 1),
vLLM's own definitions.

Send times are saved only by some versions (``start_times``). Without them the arrivals
are reconstructed: a gamma process of shape ``burstiness`` (1 = Poisson) at
``request_rate`` req/s, seeded here (vLLM's own draws cannot be recovered), or all at
0 s for ``"inf"``. Failed requests (an error, or no output) are counted and kept out
of both sides of the comparison.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.errors import ServesimError
from sim.files import read_text

REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")


@dataclass(frozen=True)
class VllmRun:
    """One vLLM benchmark's requests (all, in send order) and how arrivals were obtained.

    ``failed[i]`` marks requests with an error or no output; their latencies are NaN.
    Times are seconds; ``arrival_s`` starts at 0.
    """

    arrival_s: np.ndarray
    prompt_tokens: np.ndarray
    output_tokens: np.ndarray
    ttft_s: np.ndarray
    itls_s: list[list[float]]
    failed: np.ndarray
    arrivals_note: str
    notes: tuple[str, ...]
    meta: dict[str, Any]

    @property
    def e2e_s(self) -> np.ndarray:
        """TTFT plus the sum of the inter-token gaps (NaN for failed requests)."""
        total = np.array([math.fsum(g) for g in self.itls_s], dtype=float)
        return np.where(self.failed, np.nan, self.ttft_s + total)


def _number(x: Any, where: str, src: str) -> float:
    if isinstance(x, bool) or not isinstance(x, int | float):
        raise ServesimError(f"got {x!r}, expected a number", source=src, where=where)
    return float(x)


def arrivals(n: int, rate: Any, burstiness: Any, seed: int) -> tuple[np.ndarray, str]:
    """Reconstructed send times (s) of ``n`` requests, and a sentence saying how."""
    if rate in ("inf", None) or (isinstance(rate, int | float) and math.isinf(rate)):
        return np.zeros(n), "request_rate inf: every request sent at 0 s"
    rate = float(rate)
    shape = float(burstiness) if burstiness not in (None, "") else 1.0
    if not rate > 0 or not shape > 0:
        raise ServesimError(f"cannot rebuild arrivals from request_rate {rate!r} and "
                            f"burstiness {shape!r}")
    rng = np.random.default_rng(seed)
    gaps = rng.gamma(shape, 1.0 / (rate * shape), size=n)
    t = np.concatenate(([0.0], np.cumsum(gaps[:-1])))
    kind = "Poisson" if shape == 1.0 else f"gamma (burstiness {shape:g})"
    return t, (f"arrivals reconstructed ({kind} at {rate:g} req/s, seed {seed}): vLLM saves "
               "no per-request send times, so the predicted side sees a different draw of "
               "the same process")


def parse(data: Any, source: str, seed: int = 0) -> VllmRun:
    """Check a parsed result mapping and turn it into a :class:`VllmRun`."""
    if not isinstance(data, dict):
        raise ServesimError("expected a JSON object", source=source)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ServesimError(f"missing {', '.join(missing)}: save the result with "
                            "--save-result --save-detailed", source=source, where=missing[0])
    cols = {k: data[k] for k in REQUIRED}
    n = len(cols["input_lens"])
    for k, v in cols.items():
        if not isinstance(v, list) or len(v) != n:
            raise ServesimError(f"expected a list of {n} entries", source=source, where=k)
    if n == 0:
        raise ServesimError("the result holds no requests", source=source)
    prompt = np.array([_number(x, f"input_lens[{i}]", source)
                       for i, x in enumerate(cols["input_lens"])], dtype=np.int64)
    output = np.array([_number(x, f"output_lens[{i}]", source)
                       for i, x in enumerate(cols["output_lens"])], dtype=np.int64)
    ttft = np.array([np.nan if x is None else _number(x, f"ttfts[{i}]", source)
                     for i, x in enumerate(cols["ttfts"])], dtype=float)
    itls: list[list[float]] = []
    for i, g in enumerate(cols["itls"]):
        if not isinstance(g, list):
            raise ServesimError(f"got {g!r}, expected a list of seconds", source=source,
                                where=f"itls[{i}]")
        itls.append([_number(x, f"itls[{i}]", source) for x in g])
    errors = data.get("errors") or [""] * n
    failed = np.array([bool(errors[i]) if i < len(errors) else False for i in range(n)])
    failed |= (output < 1) | ~np.isfinite(ttft)
    ttft = np.where(failed, np.nan, ttft)
    notes = []
    if failed.any():
        notes.append(f"{int(failed.sum())} of {n} requests failed (error or no output): "
                     "counted, kept out of both sides")
    if data.get("max_concurrency") not in (None, 0):
        notes.append(f"max_concurrency {data['max_concurrency']}: the client capped "
                     "requests in flight, which servesim does not model; near saturation "
                     "the predicted queueing is too long")
    starts = data.get("start_times")
    if isinstance(starts, list) and len(starts) == n and all(
            isinstance(x, int | float) and not isinstance(x, bool) for x in starts):
        raw = np.asarray(starts, dtype=float)
        # Concurrent sends can stamp a few microseconds out of order; keep send order.
        t = np.maximum.accumulate(raw) - raw.min()
        how = "arrivals from the saved start_times"
    else:
        t, how = arrivals(n, data.get("request_rate"), data.get("burstiness"), seed)
    meta = {k: data.get(k) for k in ("date", "backend", "model_id", "num_prompts",
                                     "request_rate", "burstiness", "max_concurrency",
                                     "duration", "completed")}
    meta["aggregates_ms"] = vllm_aggregates(data)
    return VllmRun(t, prompt, output, ttft, itls, failed, how, tuple(notes), meta)


def load(path: str | Path, seed: int = 0) -> VllmRun:
    """Read a vLLM benchmark result file (see :func:`parse`)."""
    p = Path(path)
    text = read_text(p, "vLLM benchmark result")
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ServesimError(f"not valid JSON: {exc}", source=str(p)) from None
    return parse(data, str(p), seed)


def vllm_aggregates(data: dict[str, Any]) -> dict[str, float]:
    """vLLM's own summary figures (ms) found in the file, for a cross-check."""
    keys = [f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
            for s in ("mean", "median", "p90", "p99")]
    return {k: float(data[k]) for k in keys if isinstance(data.get(k), int | float)}
