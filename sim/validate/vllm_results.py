"""Read the JSON that ``vllm bench serve --save-result --save-detailed`` writes.

Per request it holds ``input_lens`` and ``output_lens`` (tokens), ``ttfts`` (seconds)
and ``itls`` (seconds between streamed chunks), plus ``errors``; run facts such as
``request_rate`` (a number, or ``"inf"``), ``burstiness``, ``max_concurrency``,
``num_prompts``, ``duration`` and ``completed``; and aggregates in milliseconds
(``median_ttft_ms`` ...). From these: E2E = TTFT + Σ ITL, and TPOT = Σ ITL / (output − 1),
vLLM's own definitions.

Send times are saved only from vLLM 0.16 (``start_times``). Without them the arrivals
are rebuilt as vLLM's client drew them from its seed (:mod:`sim.validate.vllmclient`):
gamma gaps of shape ``burstiness`` (1 = Poisson, Infinity = even gaps) at
``request_rate`` req/s or along a ramp-up (``ramp_up_strategy``), or all at 0 s for
``"inf"``. Under ``max_concurrency`` those are the times requests fell due; each was
sent when due and one of the client's slots was free. Failed requests (an error, or no
output) are counted and kept out of both sides of the comparison.

What vLLM writes for a failed request, and so what stays accepted: ``output_lens`` 0
(whatever was streamed), ``ttfts`` 0.0 (its default; the time of the first chunk if one
came before the failure), ``itls`` empty or the gaps streamed before the failure, and
in ``errors`` a message (empty when the HTTP status carried no reason, which is why no
output alone marks a request failed). Anything vLLM never writes is refused with one
line naming the key, the request's index, the value and the rule
(:data:`sim.validate.vllmfields.RULES`).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from sim.configtools import DuplicateKeyError, is_number, load_json, refuse_half_character
from sim.errors import ServesimError
from sim.files import read_text, too_deep
from sim.validate import vllmclient, vllmfields
from sim.validate.vllmfields import MAX_SPAN_S, RULES

REQUIRED = ("input_lens", "output_lens", "ttfts", "itls")

AGGREGATES = tuple(f"{s}_{m}_ms" for m in ("ttft", "tpot", "itl", "e2el")
                   for s in ("mean", "median", "p90", "p99"))


@dataclass(frozen=True)
class VllmRun:
    """One vLLM benchmark's requests (all, in send order) and how arrivals were obtained.

    ``failed[i]`` marks requests with an error or no output; their latencies are NaN.
    Times are seconds; ``arrival_s`` starts at 0. Under a ``max_concurrency`` cap
    (``concurrency``) the client sent each request when it was due (``earliest_s``) and
    one of its slots was free: servesim's paced closed loop (:mod:`sim.core.clients`).
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
    # The client's cap on requests in flight (``max_concurrency``; None: none), and then
    # the earliest time each request could go (s, from 0): 0 under ``"inf"``, else its
    # send time in the file or its arrival at the reconstructed rate.
    concurrency: int | None = None
    earliest_s: np.ndarray | None = None

    @property
    def e2e_s(self) -> np.ndarray:
        """TTFT plus the sum of the inter-token gaps (NaN for failed requests)."""
        return e2e_of(self.ttft_s, self.itls_s, self.failed)


def e2e_of(ttft_s: np.ndarray, itls_s: list[list[float]], failed: np.ndarray) -> np.ndarray:
    """Each request's E2E (s): its TTFT plus the sum of its inter-token gaps, vLLM's
    definition; NaN for failed requests."""
    total = np.array([math.fsum(g) for g in itls_s], dtype=float)
    return np.where(failed, np.nan, ttft_s + total)


def _per_request(data: dict[str, Any], key: str, n: int, src: str) -> list[Any] | None:
    """``data[key]`` as a list of ``n`` entries, or None where absent or null (and not
    one of :data:`REQUIRED`)."""
    v = data.get(key)
    if v is None and key not in REQUIRED:
        return None
    if not isinstance(v, list) or len(v) != n:
        got = f"a list of {len(v)}" if isinstance(v, list) else repr(v)
        raise ServesimError(f"got {got}, expected a list of {n} entries, one per request "
                            "(as many as input_lens)", source=src, where=key)
    return v


def parse(data: Any, source: str, seed: int = 0) -> VllmRun:
    """Check a parsed result mapping and turn it into a :class:`VllmRun`.

    Every value is checked against :data:`RULES` first; a run with no request that
    completed in vLLM is refused, as there is nothing to compare.
    """
    if not isinstance(data, dict):
        raise ServesimError("expected a JSON object", source=source)
    missing = [k for k in REQUIRED if k not in data]
    if missing:
        raise ServesimError(f"missing {', '.join(missing)}: save the result with "
                            "--save-result --save-detailed", source=source, where=missing[0])
    if not isinstance(data["input_lens"], list):
        raise ServesimError(f"got {data['input_lens']!r}, expected a list of prompt lengths",
                            source=source, where="input_lens")
    n = len(data["input_lens"])
    if n == 0:
        raise ServesimError("the result holds no requests", source=source, where="input_lens")
    cols = {k: _per_request(data, k, n, source) or [] for k in REQUIRED}
    prompt = np.array([vllmfields.whole(x, f"input_lens[{i}]", source)
                       for i, x in enumerate(cols["input_lens"])], dtype=np.int64)
    output = np.array([vllmfields.whole(x, f"output_lens[{i}]", source)
                       for i, x in enumerate(cols["output_lens"])], dtype=np.int64)
    ttft = np.array([vllmfields.seconds(x, f"ttfts[{i}]", source,
                              hint=" (vLLM writes 0.0 for a request that failed)")
                     for i, x in enumerate(cols["ttfts"])], dtype=float)
    itls: list[list[float]] = []
    for i, g in enumerate(cols["itls"]):
        if not isinstance(g, list):
            raise ServesimError(f"got {g!r}, expected a list of seconds (empty for a "
                                "request that failed)", source=source, where=f"itls[{i}]")
        itls.append([vllmfields.seconds(x, f"itls[{i}][{j}]", source) for j, x in enumerate(g)])
    errors = _per_request(data, "errors", n, source) or [None] * n
    for i, e in enumerate(errors):
        if e is not None and not isinstance(e, str):
            raise vllmfields.refuse(e, "error", f"errors[{i}]", source)
    # vLLM writes output 0 for every failed request, and an error message that can be
    # empty (an HTTP status without a reason): either marks the request failed.
    failed = np.array([bool(e) for e in errors]) | (output < 1)
    if failed.all():
        first = next((e for e in errors if e), "")
        why = f"; errors[{errors.index(first)}]: {_last_line(first)}" if first else ""
        raise ServesimError(f"all {n} requests failed in vLLM (an error or no output), "
                            f"nothing to compare{why}", source=source)
    # A failed request keeps its dataset prompt length, 0 for an empty prompt; one that
    # completed was served a prompt of at least one token.
    empty = np.flatnonzero(~failed & (prompt < 1))
    if len(empty):
        raise ServesimError("got 0 for a request that completed, expected at least 1 "
                            "prompt token", source=source, where=f"input_lens[{empty[0]}]")
    ttft = np.where(failed, np.nan, ttft)
    duration, counts = _summary(data, n, int((~failed).sum()), source)
    notes = []
    if failed.any():
        notes.append(f"{int(failed.sum())} of {n} requests failed (error or no output): "
                     "counted, kept out of both sides")
    notes += counts
    # vLLM records one gap per streamed chunk, not per token: a chunk carrying several
    # tokens (speculative decoding, a server stream interval) gives fewer, the chat
    # endpoint's role-only first chunk one more. Kept as vLLM's ITL, and said.
    done = [int(i) for i in np.flatnonzero(~failed)]
    over = next((i for i in done if len(itls[i]) > output[i]), None)
    if over is not None:
        # A chunk carries at least one token: more gaps than tokens is no run's record.
        raise ServesimError(f"{len(itls[over])} gaps for {output[over]} output tokens "
                            f"(output_lens[{over}]); a streamed chunk carries at least one "
                            "token, so at most one gap a token (the chat endpoint's "
                            "role-only first chunk included)", source=source,
                            where=f"itls[{over}]")
    off = [i for i in done if len(itls[i]) != output[i] - 1]
    if off:
        k = off[0]
        notes.append(f"{len(off)} of {len(done)} completed requests streamed other than one "
                     f"chunk per token (e.g. request {k}: {len(itls[k])} gaps for "
                     f"{output[k]} tokens): ITL compares per chunk, as vLLM measures it "
                     "(a server's --stream-interval is the scenario's "
                     "serving.stream_interval)")
    given = conc = data.get("max_concurrency")
    if conc is not None:
        conc = given = vllmfields.whole(conc, "max_concurrency", source, rule="concurrency")
        if conc > n:
            # More clients than requests: the cap never holds one back, as with n clients.
            notes.append(f"max_concurrency {conc} is more than the {n} requests: it never "
                         f"holds one back, so the run is predicted with {n} clients")
            conc = n
    rate = vllmfields.request_rate(data.get("request_rate"), source)
    shape = vllmfields.burstiness(data.get("burstiness"), source)
    starts = _per_request(data, "start_times", n, source)
    if starts is not None:
        raw = np.array([vllmfields.clock(x, f"start_times[{i}]", source)
                        for i, x in enumerate(starts)])
        t = raw - raw.min()
        how = "arrivals from the saved start_times"
        where = "start_times"
        if rate is not None and not conc and data.get("ramp_up_strategy") is None:
            # Sent as they fell due: a check of the seed a file without them would need.
            said = vllmclient.agreement(t, vllmclient.Pacing(rate, shape), seed)
            if said is not None:
                how += f"; {said}"
    elif rate is None:
        raise ServesimError("missing, and so are start_times: the arrivals cannot be "
                            f"rebuilt; expected {RULES['rate']}", source=source,
                            where="request_rate")
    else:
        pacing = vllmfields.pacing(data, rate, shape, source)
        t, how = vllmclient.rebuild(n, pacing, seed, e2e_of(ttft, itls, failed),
                                    conc or None, duration)
        where = "request_rate"
    if not np.isfinite(t).all() or t.max() >= MAX_SPAN_S:
        span = float(t.max()) if np.isfinite(t).all() else math.inf
        raise ServesimError(f"the requests' send times span {span:.3g} s, expected less "
                            f"than {MAX_SPAN_S:g} s (a float second no longer resolves a "
                            "latency there)", source=source, where=where)
    back = np.flatnonzero(np.diff(t) < 0)
    if back.size:
        # Concurrent sends stamp a few microseconds out of order (more when a client's
        # concurrency cap held them): simulate them in the order they were sent.
        worst = float(np.max(np.maximum.accumulate(t)[:-1][back] - t[1:][back]))
        notes.append(f"{back.size} start_times earlier than the one before (at most "
                     f"{worst * 1e3:.3g} ms): requests taken in the order they were sent")
        order = np.argsort(t, kind="stable")
        t, prompt, output, ttft, failed = t[order], prompt[order], output[order], \
            ttft[order], failed[order]
        itls = [itls[i] for i in order]
    earliest = None
    if conc:
        earliest, note, how = _capped(conc, t, rate, data.get("ramp_up_strategy") is not None,
                                      where == "start_times", how)
        notes.append(note)
    for name in ("date", "backend", "model_id"):
        # Text vLLM writes: they head the printed table and go into validation.json.
        text = data.get(name)
        if text is not None and not (isinstance(text, str) and text.isprintable()):
            raise ServesimError(f"got {text!r}, expected text on one line (or null)",
                                source, name)
    meta = {k: data.get(k) for k in ("date", "backend", "model_id", "num_prompts",
                                     "duration", "completed")}
    # As the file gave them (validated), but vLLM's way for inf: strict JSON has none.
    meta.update(request_rate=data.get("request_rate"), max_concurrency=given,
                burstiness="inf" if math.isinf(shape) else data.get("burstiness"))
    meta["aggregates_ms"] = vllm_aggregates(data, source)
    return VllmRun(t, prompt, output, ttft, itls, failed, how, tuple(notes), meta,
                   conc or None, earliest)


def _summary(data: dict[str, Any], n: int, done: int, src: str
             ) -> tuple[float | None, list[str]]:
    """The run's ``duration`` (s, None when absent) and notes on its counts, checked
    against the per-request lists (``n`` requests, ``done`` of them completed). What
    cannot be is refused: a duration that is no positive time, ``completed`` above the
    requests listed. A count that merely disagrees is said, since it has innocent
    causes (a dataset that gave fewer prompts than ``num_prompts``, a request vLLM
    counted as completed with no output)."""
    duration = data.get("duration")
    if duration is not None and (not is_number(duration) or not math.isfinite(duration)
                                 or not 0 < duration < MAX_SPAN_S):
        raise vllmfields.refuse(duration, "duration", "duration", src)
    notes = []
    completed = data.get("completed")
    if completed is not None:
        completed = vllmfields.whole(completed, "completed", src, rule="count")
        if completed > n:
            raise ServesimError(f"got {completed}, more than the {n} requests in the "
                                f"per-request lists; expected a whole number from 0 to {n}",
                                source=src, where="completed")
        if completed != done:
            notes.append(f"the file's completed is {completed}, but {done} of its {n} "
                         "requests completed by the per-request lists (the lists are "
                         "compared)")
    prompts = data.get("num_prompts")
    if prompts is not None and vllmfields.whole(prompts, "num_prompts", src, rule="count") != n:
        notes.append(f"the file's num_prompts is {prompts}, but its per-request lists "
                     f"hold {n} requests (the lists are compared)")
    return None if duration is None else float(duration), notes


def _capped(conc: int, t: np.ndarray, rate: float | None, ramped: bool, saved: bool,
            how: str) -> tuple[np.ndarray, str, str]:
    """Under a client cap of ``conc`` requests in flight: when each request fell due (s,
    from 0: ``t``, the send times or the rebuilt arrivals, when the client paced them at
    a rate or a ramp; else 0), the note saying so, and ``how`` the arrivals were
    obtained, reworded where the file has no send times and every request was due at
    once. vLLM's client makes each request due at its rate, then holds it until one of
    its ``max_concurrency`` slots is free, first come first served."""
    paced = rate is not None and not math.isinf(rate) or ramped
    due = (("its send time in the file" if saved else "the rebuilt rate")
           if paced else "0 s, request_rate inf")
    note = (f"max_concurrency {conc}: predicted with {conc} client{'s' if conc > 1 else ''}, "
            f"each request sent when it is due ({due}) and a client is free")
    if not saved:
        note += ("; the file has no send times, so the real side shows each request at its "
                 "due time (vLLM measures its latencies from the send)")
        if not paced:
            how = "request_rate inf: every request due at 0 s"
    return (t.copy() if paced else np.zeros(len(t))), note, how


def _last_line(text: str) -> str:
    """The last non-empty line of an error (vLLM saves whole tracebacks), shortened."""
    lines = [s.strip() for s in text.splitlines() if s.strip()]
    line = lines[-1] if lines else repr(text)
    return line if len(line) <= 120 else line[:117] + "..."


def load(path: str | Path, seed: int = 0) -> VllmRun:
    """Read a vLLM benchmark result file (see :func:`parse`)."""
    p = Path(path)
    text = read_text(p, "vLLM benchmark result")
    try:
        data = load_json(text)
    except DuplicateKeyError as exc:
        raise ServesimError(f"an object names {exc} twice", source=str(p)) from None
    except json.JSONDecodeError as exc:
        raise ServesimError(f"not valid JSON: {exc}", source=str(p)) from None
    except RecursionError:
        raise too_deep(str(p), "vLLM benchmark result") from None
    refuse_half_character(text, data, str(p))
    return parse(data, str(p), seed)


def vllm_aggregates(data: dict[str, Any], source: str | None = None) -> dict[str, float]:
    """vLLM's own summary figures (ms) found in the file, for a cross-check; absent or
    null ones are left out, any other value must be a finite number of ms, 0 or more."""
    return {k: vllmfields.seconds(data[k], k, source, rule="ms") for k in AGGREGATES
            if data.get(k) is not None}
