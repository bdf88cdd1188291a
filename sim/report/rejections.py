"""When a run's rejected requests make it no answer, and which limit to raise by how much.

A rejected request never gets a latency, so percentiles over the finished ones say
nothing about it. Counted as never served, a rejected share ``s`` leaves the p99 of every
arrived request finite only while ``s`` is at most 1%: past that, the reported p99 is of
the requests the server chose to keep. So by default a run whose rejected share is over
1% (:data:`DEFAULT_MAX_SHARE`) is refused after its outputs are written:
``--max-rejected-share`` moves the bar and ``--allow-rejections`` lifts it (load shedding
by admission control is then the point of the run). vLLM answers such requests with an
error too (HTTP 400 for a prompt over the context), so a capacity figure that drops them
silently would overstate the server.

The error names, for the reason that rejected the most requests, the scenario key that
set the limit and the value that would have admitted every request rejected for a reason
that key sets (a prompt refused under vLLM v0's rules is checked for its recompute once
it fits, so both reasons' requests need the recompute's value).
"""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np

from sim.cliargs import float_arg
from sim.core.request import NOT_ARRIVED, REJECTED
from sim.core.result import RunResult
from sim.errors import ServesimError

DEFAULT_MAX_SHARE = 0.01

# Per rejection reason: the key that set the limit, and what the requests need of it.
_LIMITS: dict[str, tuple[str, str]] = {
    "exceeds_context": ("model.max_context", "context"),
    "exceeds_kv_capacity": ("serving.num_gpu_blocks", "kv"),
    "decode_exceeds_kv_capacity": ("disaggregated.decode.num_gpu_blocks", "kv"),
    "prompt_exceeds_max_num_batched_tokens": ("serving.max_num_batched_tokens", "prompt"),
    "decode_prompt_exceeds_max_num_batched_tokens": (
        "disaggregated.decode.max_num_batched_tokens", "prompt"),
    "recompute_exceeds_max_num_batched_tokens": ("serving.max_num_batched_tokens",
                                                 "recompute"),
    "decode_recompute_exceeds_max_num_batched_tokens": (
        "disaggregated.decode.max_num_batched_tokens", "recompute"),
    "rate_limited": ("admission.rate_limit.rate", "shed"),
    "queue_full": ("admission.max_waiting", "shed"),
    "no_replica_up": ("cluster.replicas", "shed"),
}


def add_rejection_args(p: argparse.ArgumentParser) -> None:
    """``--max-rejected-share`` and ``--allow-rejections`` on a command that runs scenarios."""
    # One or the other: a share with --allow-rejections would be silently ignored.
    g = p.add_mutually_exclusive_group()
    g.add_argument("--max-rejected-share", type=float_arg(ge=0, le=1), default=DEFAULT_MAX_SHARE,
                   metavar="SHARE",
                   help="refuse a run that rejected more than this share of its arrived "
                        f"requests, 0 to 1 (default {DEFAULT_MAX_SHARE:g}: 1%%)")
    g.add_argument("--allow-rejections", action="store_true",
                   help="accept runs whatever share of requests they rejected")


def max_share(a: argparse.Namespace) -> float:
    """The share the flags allow (1.0 with ``--allow-rejections``)."""
    return 1.0 if a.allow_rejections else float(a.max_rejected_share)


def share(rejected: float, arrived: float) -> float:
    """Rejected requests over arrived ones (0 when none arrived)."""
    return rejected / arrived if arrived > 0 else 0.0


def row_share(row: dict[str, Any], kinds: tuple[str, ...] = ("rejected",)) -> float:
    """A sweep point's share of its arrived requests that ended as ``kinds`` (by default
    rejected; :data:`NOT_SERVED` adds those timed out and failed)."""
    ended = sum(row.get(k) or 0.0 for k in kinds)
    rest = sum(row.get(k) or 0.0 for k in ("finished", "rejected", "unfinished", "timed_out",
                                           "failed") if k not in kinds)
    return share(ended, ended + rest)


# The ways a request ends unserved: refused at arrival, given up on by its client
# (admission.timeout_s), lost to a replica fault.
NOT_SERVED = ("rejected", "timed_out", "failed")


def _need(kind: str, role: str, prompt: np.ndarray, output: np.ndarray, res: RunResult) -> str:
    """What the rejected requests need of the limit, in words with the number."""
    if kind == "context":
        return f"to at least {int((prompt + output).max())} (the longest prompt + output)"
    if kind == "prompt":
        return f"to at least {int(prompt.max())} (the longest prompt)"
    if kind == "recompute":
        return f"to at least {int((prompt + output - 1).max())} (the longest prompt + output " \
               "- 1, which a preempted request prefills again)"
    if kind == "kv":
        return _kv_need(res, role, prompt, output)
    return "if this load was not meant to be shed"


def _kv_need(res: RunResult, role: str, prompt: np.ndarray, output: np.ndarray) -> str:
    """The fewest KV blocks of the ``role`` pool that admit the longest rejected request,
    as its replicas count them (:meth:`sim.core.kvmanager.KVCacheManager.can_ever_hold`):
    the blocks of the tokens it holds at its peak (a prefill replica its prompt, others
    its prompt and output but the last token, plus a speculative verify's drafted slots),
    its sliding-window pages or linear-attention states' blocks, and the watermark kept
    free of them."""
    from sim.config.disagg import pool_memory, pools
    from sim.cost.kvpages import blocks_for, window_share

    pool = next(p for p in pools(res.scenario) if p.role == role)
    sv = pool.serving
    spec = res.scenario.serving.speculative
    if role == "prefill":
        tokens, what = int(prompt.max()), "the longest prompt, all a prefill replica holds"
    else:
        ahead = 0 if spec is None else spec.num_tokens
        tokens, what = int((prompt + output - 1).max()) + ahead, "the longest request"
    budget = pool_memory(res.scenario.model, pool)
    need = blocks_for(tokens, sv.block_size)
    if budget.window_blocks:
        need += window_share(budget.window_blocks, budget.window_groups, need)
        what += ", with its sliding-window layers' pages"
    if budget.state_blocks:
        need += budget.state_blocks
        what += f", with its linear-attention states' {budget.state_blocks} blocks"
    total = need
    while total - int(sv.kv_watermark * total) < need:
        total += 1
    util = ("hardware.memory_utilization (SGLang's --mem-fraction-static)"
            if pool.sglang is not None else "hardware.memory_utilization")
    return (f"to at least {total} blocks of {sv.block_size} tokens ({tokens} tokens, {what}; "
            f"or raise {util} or hardware.tp)")


# The key of summary.json (of each run in compare.json, of sweep.json) that holds the
# error a run or grid was refused with after its outputs were written.
REFUSED = "refused"


def refusal_headline(refusals: list[str]) -> str:
    """The sentence a report opens with for outputs their command refused: the figures
    leave the rejected requests out, and so overstate the server."""
    return (f"REFUSED: the command exited with an error after writing these outputs "
            f"({'; '.join(refusals)}); their latencies and throughput leave the rejected "
            "requests out and overstate the server.")


def verdict(res: RunResult, limit: float) -> ServesimError | None:
    """The error for a run whose rejected share of arrived requests is over ``limit``
    (naming the limit to raise for its most common reason), or None."""
    arrived = res.status != NOT_ARRIVED
    rejected = res.status == REJECTED
    n_arr, n_rej = int(arrived.sum()), int(rejected.sum())
    s = share(n_rej, n_arr)
    if n_rej == 0 or s <= limit:
        return None
    reasons, counts = np.unique(res.reason[rejected].astype(str), return_counts=True)
    order = sorted(range(len(reasons)), key=lambda i: (-counts[i], reasons[i]))
    top = str(reasons[order[0]])
    key, kind = _LIMITS.get(top, ("", "shed"))
    role = "decode" if top.startswith("decode_") else "both"
    if res.scenario.serving.policy == "disaggregated" and role == "both":
        # The entry pool of a disaggregated scenario is its prefill pool (its own replica
        # count where it sets one: cluster.replicas would then change nothing).
        role = "prefill"
        key = key.replace("serving.", "disaggregated.prefill.")
        if key == "cluster.replicas" and res.scenario.disaggregated.prefill.replicas:
            key = "disaggregated.prefill.replicas"
    # Every reason the same key set: a request refused for its prompt is checked for its
    # recompute once the prompt fits, so the value must admit both (the most a
    # recompute needs where one of them is among the reasons).
    same = [r for r in map(str, reasons) if r in _LIMITS and _LIMITS[r][0] == _LIMITS[top][0]
            ] if key else [top]
    if any(_LIMITS[r][1] == "recompute" for r in same if r in _LIMITS):
        kind = "recompute"
    pick = rejected & np.isin(res.reason, same)
    prompt = res.requests.prompt_tokens[pick]
    output = res.requests.output_tokens[pick]
    by = ", ".join(f"{reasons[i]} {counts[i]}" for i in order)
    # A cache SGLang's way sizes has no vLLM block override behind the key.
    flag = "" if kind == "kv" and _sglang_sized(res, role) else _vllm_flag(key)
    said = [x for x in (_current(res, key), flag) if x]
    now = f" ({'; '.join(said)})" if said else ""
    fix = f"raise {key}{now} {_need(kind, role, prompt, output, res)}" if key else \
        "see requests.csv"
    return ServesimError(
        f"{n_rej} of {n_arr} arrived requests rejected ({s:.1%}; {by}), over the "
        f"{limit:.1%} allowed (--max-rejected-share): {fix}; the outputs were written; "
        "--allow-rejections accepts the run", res.scenario.source, key or None)


def _sglang_sized(res: RunResult, role: str) -> bool:
    """Whether the ``role`` pool's KV cache is sized as SGLang sizes it (a scenario priced
    by SGLang's kernels, :mod:`sim.config.sglangpool`)."""
    from sim.config.disagg import pools

    return any(p.sglang is not None for p in pools(res.scenario) if role in (p.role, "both"))


def _vllm_flag(key: str) -> str:
    """``vLLM's --FLAG`` for a scenario key a ``vllm`` section's flag sets, else empty."""
    from sim.config.vllmnames import MAPPED

    names = {f"{sect}.{k}": flag for flag, (sect, k) in MAPPED.items()}
    return f"vLLM's --{names[key].replace('_', '-')}" if key in names else ""


def _current(res: RunResult, key: str) -> str:
    """``now V`` for a scenario key that has a value, else empty."""
    node: Any = res.scenario
    for part in key.split("."):
        node = getattr(node, part, None)
        if node is None:
            return ""
    return f"now {node}"
