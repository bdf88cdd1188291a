"""``python -m calibrate.replay_cli``: real replays of a trace at one or more load levels.

Chooses the requests (the first ``--requests`` rows of a trace, rebased to 0 s,
rescaled to each ``--rate`` in req/s, capped at the model's context), chooses the
rates when given as ``--load`` fractions of the saturation rate a cost profile
predicts, runs :func:`calibrate.executor.replay_on_device` per level and writes one
``servesim-replay/1`` JSON per level (schema in docs/validation.md). ``servesim
validate`` calls :func:`run_levels` in-process; on a machine without the simulator
(a GPU box with torch only) this command writes the files and ``servesim validate
--replay FILE`` compares them later.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import math
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from calibrate.executor import device_executor, replay_on_device
from calibrate.replay import SCHEMA, STEP_FIELDS, CostExecutor, ReplayResult, VirtualClock, run_loop
from sim.cliargs import ArgParser, float_arg, int_arg
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError

# Loads (fractions of the predicted saturation rate) below which a level counts as
# "below saturation"; at or above, "near saturation".
NEAR = 0.7
# Fewest requests a level replays when --level-s shortens it.
MIN_LEVEL = 20


@dataclass(frozen=True)
class Workload:
    """The requests of a validation: arrivals (s, for rate 1 unit unless rescaled) and lengths."""

    arrival_s: np.ndarray
    prompt: np.ndarray
    output: np.ndarray
    notes: tuple[str, ...]

    def at_rate(self, rate: float, n: int | None = None) -> np.ndarray:
        """The first ``n`` arrivals (all by default) rescaled so that n / (last - first
        arrival) = ``rate`` req/s. Scaling the first n by their own span, not the whole
        trace's, keeps a level cut short by ``--level-s`` at its rate: a trace's
        arrivals are not even, and its first rows may be sparser than the rest."""
        a = self.arrival_s[:n]
        span = float(a[-1] - a[0]) if len(a) else 0.0
        if len(a) < 2 or span <= 0:
            return np.zeros_like(a)
        return a * (len(a) / rate / span)


def trace_workload(ref: str, n: int, max_len: int, offset: int = 0) -> Workload:
    """Rows ``offset .. offset+n`` of trace ``ref`` (path or shipped name), rebased to 0 s,
    prompt + output capped at ``max_len`` tokens
    (``sim.workload.tracetools.truncate_to_context``)."""
    from sim.workload.traces import find_trace, load_trace
    from sim.workload.tracetools import truncate_to_context

    tr = load_trace(find_trace(ref, Path.cwd()))
    if tr.arrival_s is None:
        raise ServesimError(f"{ref} has no arrival times", where="--trace")
    if n < 2 or offset < 0 or offset + n > len(tr):
        raise ServesimError(f"cannot take {n} rows from {offset} of a {len(tr)}-row trace",
                            where="--offset" if not 0 <= offset < len(tr) else "--requests")
    idx = np.arange(offset, offset + n)
    tr = dataclasses.replace(tr, arrival_s=tr.arrival_s[idx] - tr.arrival_s[offset],
                             prompt_tokens=tr.prompt_tokens[idx],
                             output_tokens=tr.output_tokens[idx], priority=None, klass=None,
                             prefix_hashes=None)
    tr, change = truncate_to_context(tr, max_len)
    assert tr.arrival_s is not None
    return Workload(tr.arrival_s, tr.prompt_tokens, tr.output_tokens,
                    (f"{tr.source}: rows {offset}..{offset + n - 1}", str(change)))


def serving_config(values: dict[str, Any]) -> Any:
    """A validated ``sim.config.serving.ServingConfig`` from plain values."""
    from sim.config.serving import ServingConfig
    from sim.configtools import build

    return build(ServingConfig, {k: v for k, v in values.items() if v is not None}, "serving")


# The flag of each serving setting the replay takes from its command line.
FLAGS = {"policy": "--policy", "max_num_seqs": "--max-num-seqs",
         "max_num_batched_tokens": "--max-num-batched-tokens", "token_budget": "--token-budget",
         "block_size": "--block-size", "watermark": "--watermark",
         "num_gpu_blocks": "--num-kv-blocks"}


def serving_of(args: argparse.Namespace, max_len: int) -> Any:
    """The replay's serving settings from its flags (``max_len``: tokens a request may
    span); a value they refuse is one error naming its flag, not the scenario key."""
    blocks = args.num_kv_blocks or args.max_num_seqs * -(-max_len // args.block_size)
    try:
        return serving_config({
            "policy": args.policy, "max_num_seqs": args.max_num_seqs,
            "max_num_batched_tokens": args.max_num_batched_tokens or max_len,
            "token_budget": args.token_budget, "block_size": args.block_size,
            "watermark": args.watermark, "num_gpu_blocks": blocks})
    except ServesimError as exc:
        key = (exc.where or "").removeprefix("serving.")
        raise ServesimError(exc.message, exc.source, FLAGS.get(key, exc.where)) from None


def saturation_rate(w: Workload, serving: Any, max_context: int, cost: Any) -> float:
    """Requests/s the cost model predicts the loop sustains: every request queued at 0 s,
    90% of them finished over the time that took (the drain tail left out)."""
    res = run_loop(np.zeros(len(w.prompt)), w.prompt, w.output, serving, max_context,
                   CostExecutor(cost), VirtualClock())
    done = np.sort(res.finish[np.isfinite(res.finish)])
    if done.size == 0:
        raise ServesimError(f"none of the {len(w.prompt)} requests can finish under these "
                            f"limits: {refusals(res.reason, serving)}")
    k = max(1, int(math.ceil(0.9 * done.size)))
    return k / float(done[k - 1])


# The flag that sets each limit a request may be refused for (the simulator's reasons).
LIMITS = {"exceeds_context": "--max-len",
          "exceeds_kv_capacity": "--num-kv-blocks",
          "prompt_exceeds_max_num_batched_tokens": "--max-num-batched-tokens",
          "recompute_exceeds_max_num_batched_tokens": "--max-num-batched-tokens"}


def refusals(reasons: list[str], serving: Any) -> str:
    """Why requests were refused, counted by reason, each with the flag that sets its
    limit and that limit's value (``serving``: the replay's settings)."""
    blocks = serving.num_gpu_blocks
    now = {"--num-kv-blocks": f"{blocks} block{'s' if blocks != 1 else ''} of "
                              f"{serving.block_size} tokens",
           "--max-num-batched-tokens": f"{serving.max_num_batched_tokens} tokens"}
    counts: dict[str, int] = {}
    for why in reasons:
        if why:
            counts[why] = counts.get(why, 0) + 1
    if not counts:
        return "none was refused, and none finished"
    parts = []
    for why, n in sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])):
        flag = LIMITS.get(why)
        hint = f" (raise {flag}{', now ' + now[flag] if flag in now else ''})" if flag else ""
        parts.append(f"{n} refused as {why}{hint}")
    return "; ".join(parts)


def to_record(res: ReplayResult, meta: dict[str, Any]) -> dict[str, Any]:
    """The ``servesim-replay/1`` mapping of a result (NaN written as null)."""
    def num(xs: Iterable[float]) -> list[float | None]:
        return [None if not math.isfinite(x) else round(float(x), 9) for x in xs]

    steps = np.asarray(res.steps, dtype=float).reshape(-1, len(STEP_FIELDS))
    return {
        "schema": SCHEMA,
        "created": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        **meta,
        "wall_s": round(res.wall_s, 3),
        "requests": {
            "arrival_s": num(res.arrival_s), "prompt_tokens": res.prompt_tokens.tolist(),
            "output_tokens": res.output_tokens.tolist(),
            "first_scheduled_s": num(res.first_sched), "first_token_s": num(res.first_token),
            "finish_s": num(res.finish), "preemptions": res.preemptions.tolist(),
            "status": res.status, "reason": res.reason,
        },
        "steps": {k: num(steps[:, i]) for i, k in enumerate(STEP_FIELDS)},
    }


def probe_shapes(slots: int, capacity: int) -> dict[str, list[tuple[int, int, int]]]:
    """Fixed steps timed on the executor around each level, as (slot, new, context)
    entries: a 1-entry and a several-entry decode and a short prefill, sized to fit."""
    c = max(1, min(300, capacity // 4))
    b = max(1, min(4, slots))
    ctx = [min(c + 100 * i, capacity - 2) for i in range(b)]
    n = max(2, min(200, capacity - 1))
    return {f"decode b=1 c={c}": [(0, 1, c)],
            f"decode b={b} c~{sum(ctx) // b}": [(i, 1, x) for i, x in enumerate(ctx)],
            f"prefill n={n}": [(0, n, 0)]}


def probe(ex: Any, shapes: dict[str, list[tuple[int, int, int]]],
          target_s: float = 0.1) -> dict[str, float]:
    """Median seconds of each probe step on executor ``ex`` (two warm-up calls, then
    repeats for about ``target_s`` each, at least 5). Only between levels: it writes
    into cache slots no request holds then."""
    out = {}
    with torch.inference_mode():
        for label, entries in shapes.items():
            tokens = [1] * sum(n for _, n, _ in entries)
            for _ in range(2):
                ex.step(entries, tokens)
            times: list[float] = []
            while len(times) < 5 or (sum(times) < target_s and len(times) < 200):
                times.append(ex.step(entries, tokens)[1])
            out[label] = float(np.median(times))
    return out


def run_levels(spec: ModelSpec, w: Workload, serving: Any, rates: list[float],
               loads: list[float | None], device: str, dtype: str | None, threads: int,
               trace: str, log: Callable[[str], None], level_s: float | None = None,
               on_record: Callable[[dict[str, Any]], None] | None = None
               ) -> list[dict[str, Any]]:
    """Replay ``w`` at each rate (req/s) on the device; one record per level, each also
    handed to ``on_record`` as soon as it is made (so a later timeout loses only its own)."""
    records: list[dict[str, Any]] = []

    def keep(res: Any, meta: dict[str, Any]) -> None:
        records.append(to_record(res, meta))
        if on_record is not None:
            on_record(records[-1])
    capacity = int(min(spec.max_context, max(int((w.prompt + w.output).max()), 2)))
    ex = device_executor(spec, device, dtype, threads, serving.max_num_seqs, capacity,
                         int(w.prompt.max()), log=log)
    # The machine's speed on fixed steps just before and after each level, against the
    # profile's price for them (docs/validation.md: a CPU's speed drifts).
    shapes = probe_shapes(ex[0].slots, ex[0].capacity)
    for rate, load in zip(rates, loads, strict=True):
        before = probe(ex[0], shapes)
        label = ("near" if load >= NEAR else "below") if load is not None else "rate"
        # --level-s: only the requests that arrive within that many seconds at this rate.
        n = len(w.prompt) if level_s is None else min(len(w.prompt),
                                                      max(MIN_LEVEL, int(rate * level_s)))
        log(f"replaying {n} requests at {rate:.3g} req/s"
            f"{f' (load {load:.2f} of predicted saturation)' if load is not None else ''}")
        res, info = replay_on_device(spec, w.at_rate(rate, n), w.prompt[:n], w.output[:n],
                                     serving, device, dtype, threads, log=log, executor=ex)
        fin = np.isfinite(res.finish)
        meta: dict[str, Any] = {
            "label": f"{label}-{rate:.3g}rps", "level": label, "rate_rps": rate,
            "load": load, "trace": trace, "notes": list(w.notes),
            "model": dataclasses.asdict(spec), "device": info,
            "serving": dataclasses.asdict(serving)}
        if res.interrupted:
            # Keep what the level served, say so, and stop as asked (no probe after it).
            left = res.status.count("unfinished")
            log(f"  interrupted after {res.wall_s:.1f} s: {int(fin.sum())} finished, "
                f"{left} unfinished; writing the level as far as it went")
            meta["notes"] = [*meta["notes"], f"interrupted after {res.wall_s:.1f} s: "
                             f"{left} of {n} requests unfinished"]
            keep(res, meta)
            raise KeyboardInterrupt
        try:
            after = probe(ex[0], shapes)
        except KeyboardInterrupt:
            # The level itself is complete: keep it, without the probe it did not finish.
            keep(res, meta)
            raise
        log(f"  done in {res.wall_s:.1f} s: {int(fin.sum())} finished, "
            f"{res.status.count('rejected')} rejected, {len(res.steps)} iterations")
        meta["probe"] = {"entries": {k: [[n, c] for _, n, c in e] for k, e in shapes.items()},
                         "before_s": before, "after_s": after}
        keep(res, meta)
    return records


def parser() -> argparse.ArgumentParser:
    """Arguments shared with ``servesim validate`` (which adds its own)."""
    p = ArgParser(prog="python -m calibrate.replay_cli",
                                description="Replay a trace for real on this device's model.")
    add_replay_args(p)
    p.add_argument("--out", type=Path, required=True, help="folder for replay-LABEL.json files")
    return p


# The fractions of the predicted saturation rate replayed when neither --rate nor --load
# is given: one level well below saturation and one near it.
DEFAULT_LOADS = "0.5,0.85"


def add_replay_args(p: argparse.ArgumentParser) -> None:
    """The model, device, trace, load and serving-limit options."""
    p.add_argument("--model", default=None, help="model preset, e.g. tiny or llama-3-8b")
    p.add_argument("--hf-config", type=Path, default=None, help="HuggingFace config.json")
    p.add_argument("--device", default="cuda", help="cuda or cpu (default cuda)")
    p.add_argument("--dtype", choices=("bf16", "fp16", "fp32"), default=None)
    p.add_argument("--threads", type=int_arg(ge=1, le=1024), default=1,
                   help="CPU threads (default 1)")
    p.add_argument("--trace", default="azure_2023_conv", help="trace path or shipped name")
    p.add_argument("--requests", type=int_arg(ge=1), default=100,
                   help="rows of the trace to replay")
    p.add_argument("--offset", type=int_arg(ge=0), default=0, help="first row of the trace to use")
    p.add_argument("--level-s", type=float, default=None,
                   help="replay at most the requests arriving in this many seconds per level "
                        f"(at least {MIN_LEVEL}), to bound the run's time")
    p.add_argument("--rate", default=None, help="req/s, comma-separated for several levels")
    p.add_argument("--load", default=None,
                   help=f"fractions of the profile's predicted saturation rate (default "
                        f"{DEFAULT_LOADS}; not with --rate)")
    p.add_argument("--profile", default=None, help="cost profile (needed for --load)")
    p.add_argument("--max-len", type=int_arg(ge=1), default=None,
                   help="cap prompt+output tokens (default: the model's context)")
    p.add_argument("--policy", choices=("continuous", "chunked"), default="continuous")
    p.add_argument("--max-num-seqs", type=int_arg(ge=1), default=64)
    p.add_argument("--max-num-batched-tokens", type=int_arg(ge=1), default=None,
                   help="default: --max-len (continuous needs a whole prompt per step)")
    p.add_argument("--token-budget", type=int_arg(ge=1), default=None,
                   help="chunked: tokens per step")
    p.add_argument("--block-size", type=int_arg(ge=1, le=65536), default=16)
    p.add_argument("--watermark", type=float_arg(ge=0, lt=1), default=0.01)
    p.add_argument("--num-kv-blocks", type=int_arg(ge=1), default=None,
                   help="KV blocks (default: enough for every slot to hold --max-len)")


def check_args(args: argparse.Namespace) -> None:
    """Reject values no replay can use before anything runs (``servesim validate`` may
    calibrate first: a bad value found after that would cost its minute)."""
    if args.level_s is not None and not 0 < args.level_s < math.inf:
        raise ServesimError(f"got {args.level_s:g}, must be > 0 seconds", where="--level-s")
    if args.rate and args.load is not None:
        # --rate sets the levels itself: a --load beside it was dropped without a word.
        raise ServesimError(f"got --load {args.load} with --rate {args.rate}: --load turns "
                            "fractions of saturation into rates, --rate gives the rates; "
                            "give one", where="--load")
    if args.rate:
        positive_list(args.rate, "--rate", distinct=True)
    positive_list(args.load or DEFAULT_LOADS, "--load", distinct=True)
    # The trace and its rows too (a missing file, an --offset past its end): cheap to
    # read, and found now rather than after a calibration.
    from calibrate.arch import resolve_model

    spec = resolve_model(args.model, args.hf_config)
    if args.max_len is not None and args.max_len > spec.max_context:
        raise ServesimError(f"got {args.max_len}, above model {spec.name}'s context of "
                            f"{spec.max_context} tokens; give at most that", where="--max-len")
    trace_workload(args.trace, args.requests, args.max_len or spec.max_context, args.offset)
    serving_of(args, args.max_len or spec.max_context)
    if args.profile:
        # A profile of another model would be found out only after the real run.
        from sim.cost.profilefile import load_profile
        from sim.validate.replayfile import model_mismatch

        why = model_mismatch(load_profile(args.profile, Path.cwd()), dataclasses.asdict(spec),
                             "run")
        if why:
            raise ServesimError(f"profile {args.profile}: {why}", where="--profile")


def positive_list(text: str, flag: str, distinct: bool = False) -> list[float]:
    """A comma list of finite numbers above 0 (req/s, or fractions of saturation), each
    once where ``distinct`` (a level given twice replays the same requests again)."""
    try:
        vals = [float(x) for x in str(text).split(",")]
    except ValueError:
        raise ServesimError(f"got {text!r}, expected a comma list of numbers above 0",
                            where=flag) from None
    if any(not (math.isfinite(v) and v > 0) for v in vals):
        raise ServesimError(f"got {text!r}, each must be a finite number above 0", where=flag)
    if distinct and len(set(vals)) < len(vals):
        raise ServesimError(f"got {text!r}: a level is given twice; give each once",
                            where=flag)
    return vals


def prepare_levels(args: argparse.Namespace, log: Callable[[str], None],
                   shown: str | None = None
                   ) -> tuple[ModelSpec, Workload, Any, list[float], list[float | None], Any]:
    """(model, workload, serving, rates, loads, profile or None) from parsed arguments;
    ``shown``: the profile's path in messages, where it differs from ``--profile`` (a
    profile calibrated into a temporary folder that is renamed when the run ends)."""
    from calibrate.arch import resolve_model
    from sim.cost.profilefile import load_profile

    spec = resolve_model(args.model, args.hf_config)
    prof = load_profile(args.profile, Path.cwd()) if args.profile else None
    max_len = args.max_len or spec.max_context  # check_args refused one above the context
    w = trace_workload(args.trace, args.requests, max_len, args.offset)
    serving = serving_of(args, max_len)
    sat = saturation_rate(w, serving, spec.max_context, prof) if prof is not None else None
    if sat is not None:
        log(f"predicted saturation: {sat:.3g} req/s for these requests "
            f"({shown or args.profile})")
    if args.rate:
        rates = positive_list(args.rate, "--rate")
        loads: list[float | None] = [r / sat if sat else None for r in rates]
    else:
        if sat is None:
            raise ServesimError("give --rate, or --profile so that --load can be turned "
                                "into rates", where="--rate")
        loads = list(positive_list(args.load or DEFAULT_LOADS, "--load"))
        rates = [sat * f for f in loads if f is not None]
    if any(not r > 0 for r in rates):
        raise ServesimError(f"rates must be > 0, got {rates}", where="--rate")
    return spec, w, serving, rates, loads, prof


def main(argv: list[str] | None = None) -> int:
    """Replay and write ``OUT/replay-LABEL.json`` per level; errors are one line, exit 2."""
    def log(text: str) -> None:
        print(text, file=sys.stderr, flush=True)
    try:
        args = parser().parse_args(argv)
        check_args(args)
        spec, w, serving, rates, loads, _ = prepare_levels(args, log)
        args.out.mkdir(parents=True, exist_ok=True)

        def write(rec: dict[str, Any]) -> None:
            path = args.out / f"replay-{rec['label']}.json"
            path.write_text(json.dumps(rec, allow_nan=False) + "\n", encoding="utf-8")
            print(f"wrote {path}", flush=True)
        run_levels(spec, w, serving, rates, loads, args.device, args.dtype, args.threads,
                   args.trace, log, args.level_s, write)
    except ServesimError as exc:
        print(f"replay: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("replay: interrupted; the levels run so far are written (the last as far as "
              "it went)", file=sys.stderr)
        return 130
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
