"""Closed-loop workloads: what N clients send, as :class:`sim.workload.requests.Requests` without
arrival times.

``workload.concurrency: N`` replaces an arrival process by N clients. Each sends its next
request the moment its previous one ends (plus ``think_time_s``); at the start all N
send at once. The requests themselves — lengths, class, priority, prefix hashes — are
drawn here exactly as for open loop, only their send times are left +inf:
:mod:`sim.core.clients` assigns them while the simulation runs, request i going to the next
client that is free.

Paced clients (``workload.arrivals`` beside ``concurrency``, as ``vllm bench serve
--request-rate R --max-concurrency N`` runs): the arrival process is drawn first, as an
open loop draws it, and each request keeps its arrival as the time it falls due; it is
sent when due and a client is free, first come first served (:mod:`sim.core.clients`).
The number of requests is then the arrival process's (``num_requests``, ``duration_s``).

Lengths come from ``workload.lengths`` (or classes drawn by weight), or from a
``workload.trace`` in file order (its arrival times ignored). ``num_requests`` bounds
the requests sent; ``duration_s`` stops the clients: none sends at or after it. With
``duration_s`` alone the number sent is not known in advance, so requests are drawn in
chunks of :data:`CHUNK` as the clients need them (:func:`supply`), from the same seeded
generator, so a seed still fixes the run.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from pathlib import Path

import numpy as np

from sim.workload.draw import sample_lengths, workload_arrivals
from sim.workload.requests import Requests, WorkloadConfig

CHUNK = 4096  # requests drawn at a time when only duration_s bounds a closed loop


def first_chunk(cfg: WorkloadConfig) -> int:
    """How many requests to draw before the run: all of them, or a first chunk."""
    return cfg.num_requests if cfg.num_requests is not None else CHUNK


def unsent(n: int, notes: list[str]) -> np.ndarray:
    """Send times of a trace's ``n`` requests before the run (+inf: not sent yet), the
    trace's own arrival times being ignored (said in ``notes``)."""
    notes.append("closed loop: the trace's arrival times are ignored; its lengths are sent "
                 "in file order")
    return np.full(n, np.inf)


def closed_requests(cfg: WorkloadConfig, n: int, base_dir: Path | None,
                    rng: np.random.Generator, source: str) -> Requests:
    """``n`` generated requests (lengths in tokens, class, priority, prefix hashes) with
    arrival times +inf, drawn in the same order as an open-loop workload's; for paced
    clients as many as ``workload.arrivals`` sends, each with its due time (s)."""
    due = None
    if cfg.arrivals is not None:
        due = workload_arrivals(cfg, rng)
        n = len(due)
    if cfg.classes is not None:
        from sim.workload.mix import draw_by_weight

        reqs = draw_by_weight(cfg, n, rng, base_dir, source)
    else:
        assert cfg.lengths is not None
        notes: list[str] = []
        prompt, output = sample_lengths(cfg.lengths, n, rng, base_dir, source,
                                        "workload.lengths", notes)
        prio = None if cfg.priority is None else cfg.priority.sample(n, rng)
        reqs = Requests(np.full(n, np.inf), prompt, output, priority=prio, notes=tuple(notes))
    if due is not None:
        reqs = dataclasses.replace(reqs, arrival_s=due)
    if cfg.shared_prefix is not None:
        reqs = cfg.shared_prefix.apply(reqs, rng)
    return reqs


def supply(cfg: WorkloadConfig, base_dir: Path | None, rng: np.random.Generator,
           source: str) -> Callable[[], Requests] | None:
    """More requests for clients bounded only by ``duration_s`` (a chunk per call, from
    ``rng`` continuing where the first chunk stopped); None when the requests are all
    known before the run (``num_requests``, a trace, or an arrival process)."""
    if (cfg.concurrency is None or cfg.num_requests is not None or cfg.trace is not None
            or cfg.arrivals is not None):
        return None
    return lambda: closed_requests(cfg, CHUNK, base_dir, rng, source)


def concat(a: Requests, b: Requests) -> Requests:
    """``a`` followed by ``b`` (chunks of one workload: same classes and prefix blocks)."""
    def join(x: np.ndarray | None, y: np.ndarray | None) -> np.ndarray | None:
        return None if x is None or y is None else np.concatenate([x, y])

    hashes = (None if a.prefix_hashes is None or b.prefix_hashes is None
              else a.prefix_hashes + b.prefix_hashes)
    return dataclasses.replace(
        a, arrival_s=np.concatenate([a.arrival_s, b.arrival_s]),
        prompt_tokens=np.concatenate([a.prompt_tokens, b.prompt_tokens]),
        output_tokens=np.concatenate([a.output_tokens, b.output_tokens]),
        priority=join(a.priority, b.priority), klass=join(a.klass, b.klass),
        prefix_hashes=hashes)


def take(reqs: Requests, n: int) -> Requests:
    """The first ``n`` requests of ``reqs``."""
    def head(x: np.ndarray | None) -> np.ndarray | None:
        return None if x is None else x[:n]

    return dataclasses.replace(
        reqs, arrival_s=reqs.arrival_s[:n], prompt_tokens=reqs.prompt_tokens[:n],
        output_tokens=reqs.output_tokens[:n], priority=head(reqs.priority),
        klass=head(reqs.klass),
        prefix_hashes=None if reqs.prefix_hashes is None else reqs.prefix_hashes[:n])
