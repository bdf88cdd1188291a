"""Execution backends for independent simulations: in-process, a local process pool, Ray.

Every backend takes a picklable top-level function and a list of arguments and yields
``(index, result)`` pairs *as they finish* (any order), so callers can cache each
result the moment it exists and an interrupted run loses at most the points in flight.
Callers that need a deterministic output order sort by index themselves.

- ``serial``: in this process, one at a time (what one worker means; easy to debug).
- ``local``: :class:`concurrent.futures.ProcessPoolExecutor` over ``workers`` processes
  (default: every core this process may use).
- ``ray``: one Ray task per item on a cluster (``address``) or a local Ray instance.
  Ray is an optional extra (``pip install servesim[ray]``); every node must have servesim
  installed, because tasks import :mod:`sim` by name.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

from sim.errors import ServesimError

A = TypeVar("A")
R = TypeVar("R")

BACKENDS = ("local", "ray")


def default_workers() -> int:
    """Cores this process may run on (the affinity mask, not the machine's total)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except AttributeError:  # not on Linux
        return max(1, os.cpu_count() or 1)


def _serial(fn: Callable[[A], R], items: Sequence[A]) -> Iterator[tuple[int, R]]:
    for i, item in enumerate(items):
        yield i, fn(item)


def _local(fn: Callable[[A], R], items: Sequence[A], workers: int) -> Iterator[tuple[int, R]]:
    from concurrent.futures import FIRST_COMPLETED, ProcessPoolExecutor, wait

    pool = ProcessPoolExecutor(max_workers=min(workers, len(items)))
    try:
        # Submitting everything up front keeps every worker busy; the pool queues the rest.
        futures = {pool.submit(fn, item): i for i, item in enumerate(items)}
        pending = set(futures)
        while pending:
            done, pending = wait(pending, return_when=FIRST_COMPLETED)
            # Yield in index order within one wake-up so that ties are reproducible.
            for fut in sorted(done, key=futures.__getitem__):
                yield futures[fut], fut.result()
    finally:
        # On an interrupt or an error, drop the queued points instead of running them.
        pool.shutdown(wait=True, cancel_futures=True)


def _ray(fn: Callable[[A], R], items: Sequence[A], address: str | None,
         workers: int | None) -> Iterator[tuple[int, R]]:
    try:
        import ray
    except ImportError:
        raise ServesimError("--backend ray needs Ray; install servesim[ray] "
                            "(pip install 'ray[default]')") from None
    if not ray.is_initialized():
        kwargs: dict[str, Any] = {"ignore_reinit_error": True, "log_to_driver": False}
        if address:
            kwargs["address"] = address
        elif workers is not None and not os.environ.get("RAY_ADDRESS"):
            # A CPU count is for a new local instance only; Ray refuses one when it joins
            # a cluster (which RAY_ADDRESS names).
            kwargs["num_cpus"] = workers
        where = address or os.environ.get("RAY_ADDRESS")
        try:
            ray.init(**kwargs)
        except (ConnectionError, ValueError, RuntimeError) as exc:
            what = f"--ray-address {where}" if where else "--backend ray"
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise ServesimError(f"{what}: cannot start or reach Ray ({first})") from None
    remote = ray.remote(num_cpus=1)(fn)
    refs = {remote.remote(item): i for i, item in enumerate(items)}
    pending = list(refs)
    try:
        while pending:
            done, pending = ray.wait(pending, num_returns=1)
            for ref in done:
                yield refs[ref], ray.get(ref)
    finally:
        for ref in pending:
            ray.cancel(ref, force=True)


def run_all(fn: Callable[[A], R], items: Sequence[A], backend: str = "local",
            workers: int | None = None, address: str | None = None) -> Iterator[tuple[int, R]]:
    """Run ``fn`` on every item with ``backend``; yield ``(index, result)`` as each finishes.

    ``workers`` caps concurrent processes (local; the CPU count given to a *new* local
    Ray instance); one worker, or one item, runs in this process. ``address`` is a Ray
    cluster address (``ray://host:10001`` or ``auto``); None starts Ray locally.
    """
    if backend not in BACKENDS:
        raise ServesimError(f"--backend {backend}: unknown backend; valid: {', '.join(BACKENDS)}")
    if workers is not None and workers < 1:
        raise ServesimError(f"--workers {workers}: must be at least 1")
    if not items:
        return iter(())
    if backend == "ray":
        return _ray(fn, items, address, workers)
    n = default_workers() if workers is None else workers
    if n == 1 or len(items) == 1:
        return _serial(fn, items)
    return _local(fn, items, n)
