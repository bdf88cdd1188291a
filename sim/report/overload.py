"""Is the system keeping up? The saturation verdict of a run's summary.

Under overload the waiting queue grows without bound (or, with admission control, the
front end refuses work). Both are measured from the per-request arrays after the run,
so the hot path pays nothing:

- ``waiting(t)`` = requests arrived by t that have not yet left the waiting queue. A
  request leaves it when first scheduled, when refused (at its arrival), when abandoned
  (at ``arrival + admission.timeout_s``) or when it fails; one never scheduled is still
  waiting. (A preempted request back in the queue is not counted again.)
- ``queue_growth_rps``: the least-squares slope of ``waiting`` sampled at 201 evenly
  spaced times from the first to the last arrival (requests/s).
- ``offered_rps``: (arrivals - 1) / (last arrival - first arrival).
- ``refused_fraction``: share of the requests that arrived refused at arrival by
  admission control (``rate_limited``, ``queue_full``, ``no_replica_up``: status
  ``rejected``) or abandoned (``timed_out``). A retry that finds no replica up ends
  ``failed``: lost to an outage, not refused, so not counted.

Only requests that arrived count: with ``horizon_s``, one due at or after the horizon
(status ``not_arrived``) is not part of the run, so it neither offers load nor waits.
One that arrived and was not done by the horizon (``unfinished``) is backlog and does.

``saturated`` is true when the queue grows by more than :data:`SATURATION_SHARE` of the
offered rate (the cluster serves under ~95% of what arrives) or more than that share of
requests were refused or abandoned; with paced closed-loop clients, also when the
requests due but held at the clients grow by more than that share of the rate they fall
due at (``due_rps``, ``client_backlog_growth_rps``; the verdict on them alone is
``clients_behind``). A stable system's queue fluctuates around a constant length, so its
fitted slope is a small fraction of the offered rate; at 10x overload it is about 0.9 of
it.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from sim.core.request import FAILED, NOT_ARRIVED, REJECTED, TIMED_OUT

if TYPE_CHECKING:
    from sim.core.engine import RunResult

SATURATION_SHARE = 0.05
REFUSALS = ("rate_limited", "queue_full", "no_replica_up")
SAMPLES = 201


def waiting_curve(res: RunResult, times: np.ndarray) -> np.ndarray:
    """Requests waiting unscheduled at the engine at each of ``times`` (seconds, sorted):
    from when the engine saw each (its send time, plus the frontend's delay when priced)
    until it was scheduled, refused, or its client gave up."""
    sent = res.requests.arrival_s
    arr = sent if res.seen_s is None else np.where(np.isnan(res.seen_s), np.inf, res.seen_s)
    status = res.status
    leave = res.first_sched.copy()
    gone = (status == REJECTED) | (status == FAILED)
    leave[gone] = arr[gone]
    timeout = res.scenario.admission.timeout_s
    if timeout is not None:
        late = status == TIMED_OUT
        leave[late] = np.maximum(sent[late] + timeout, arr[late])
    leave[np.isnan(leave)] = np.inf
    arrived = np.searchsorted(np.sort(arr), times, side="right")
    left = np.searchsorted(np.sort(leave), times, side="right")
    return (arrived - left).astype(np.int64)


def saturation(res: RunResult) -> dict[str, Any]:
    """The ``saturation`` section of the summary (rates in requests/s), of the requests
    that arrived."""
    came = res.status != NOT_ARRIVED
    arr = res.requests.arrival_s[came]
    n = len(arr)
    # Refused at arrival only: a lost request whose retry found no replica up failed
    # (an outage, not overload) though its reason reads like a refusal.
    refused = int((res.status == TIMED_OUT).sum()
                  + ((res.status == REJECTED) & np.isin(res.reason, REFUSALS)).sum())
    frac = refused / n if n else 0.0
    growth = offered = None
    peak = 0
    if n >= 2 and arr[-1] > arr[0]:
        t0, t1 = float(arr[0]), float(arr[-1])
        growth, peak = trend(t0, t1, lambda times: waiting_curve(res, times))
        offered = (n - 1) / (t1 - t0)
    grows = growth is not None and offered is not None and growth > SATURATION_SHARE * offered
    out: dict[str, Any] = {
        "offered_rps": offered,
        "queue_growth_rps": growth,
        "peak_waiting": peak,
        "refused_fraction": frac,
        "saturated": bool(grows or frac > SATURATION_SHARE),
    }
    c = res.clients
    if c is not None and c.due_s is not None and c.sent_s is not None:
        # Paced clients cap what the engine queues: falling behind shows as requests due
        # and not yet sent, held at the clients.
        due_rps, held = client_backlog(c.due_s, c.sent_s)
        behind = held is not None and due_rps is not None and held > SATURATION_SHARE * due_rps
        out.update(due_rps=due_rps, client_backlog_growth_rps=held, clients_behind=behind,
                   saturated=bool(out["saturated"] or behind))
    return out


def trend(t0: float, t1: float, count: Callable[[np.ndarray], np.ndarray]) -> tuple[float, int]:
    """The least-squares slope (per second) of ``count`` (a count at each of an array of
    times) sampled at :data:`SAMPLES` evenly spaced times from ``t0`` to ``t1`` (s, t0 <
    t1), and its largest sample."""
    times = np.linspace(t0, t1, SAMPLES)
    curve = count(times)
    # Fit on time normalised to [0, 1]: well conditioned whatever the span (a trace may
    # put all arrivals within nanoseconds), then back to per second.
    x = (times - t0) / (t1 - t0)
    return float(np.polyfit(x, curve.astype(float), 1)[0]) / (t1 - t0), int(curve.max())


def client_backlog(due: np.ndarray, sent: np.ndarray) -> tuple[float | None, float | None]:
    """Paced clients' (rate requests fell due at, growth of those due and not yet sent),
    both requests/s, from the first to the last due time (``sent``: +inf for a request
    never sent); (None, None) when the due times do not span an interval. Clients that
    keep up hold a bounded backlog; ones that do not, one growing as they fall behind."""
    if len(due) < 2 or not due.max() > due.min():
        return None, None
    t0, t1 = float(due.min()), float(due.max())
    by_due, by_send = np.sort(due), np.sort(sent)

    def held(times: np.ndarray) -> np.ndarray:
        return (np.searchsorted(by_due, times, side="right")
                - np.searchsorted(by_send, times, side="right"))

    return (len(due) - 1) / (t1 - t0), trend(t0, t1, held)[0]
