"""Run outputs: requests.csv, summary.json, a printed table and TTFT/TPOT CDF plots.

A mixed workload's table ends with a per-class block, and requests.csv's last column
names each request's class (empty without classes).

A run's files are written into a temporary folder that then replaces the output folder
whole (:mod:`sim.report.folder`), so an interrupted run leaves the previous outputs as
they were, never a mix of old and new files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.scenario import input_files
from sim.core.engine import RunResult
from sim.core.request import STATUS_NAMES
from sim.errors import ServesimError
from sim.report.cdfplot import plot_cdfs
from sim.report.csvmeta import meta_json, meta_path
from sim.report.folder import replaced_folder
from sim.report.human import cost_phrase, memory_terms, ms, setup_phrase
from sim.report.metrics import clean, per_request
from sim.report.stagereport import plot_over_time, stage_table
from sim.report.texttable import cell, left_width, ms_cell, right_columns

__all__ = ["plot_cdfs"]  # compare and validate draw their CDFs through this module

CSV_COLUMNS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "first_scheduled_s",
               "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "preemptions",
               "replica", "status", "reason", "class")


# The longest folder name (bytes) out/ takes: file systems' 255 (NAME_MAX), less the
# ".tmp-<pid>" a run writes beside it (sim.report.folder) with room for a 10-digit pid.
MAX_FOLDER_BYTES = 255 - 15


def shorten(text: str, most: int = 40) -> str:
    """``text``, or its first ``most`` characters and an ellipsis: a long name quoted in an
    error stays readable."""
    return text if len(text) <= most else text[:most] + "\u2026"


def default_out(name: str, suffix: str = "", source: str | None = None) -> Path:
    """``out/NAME[SUFFIX]``, the folder a command writes to when not given ``--out``; an
    error when the scenario's name is not one plain folder name (a ``/``, ``..``), which
    would put the outputs somewhere else, or is longer than a folder name may be."""
    folder = f"{name}{suffix}"
    # Blank or space-edged names make folders a shell listing hides ("out/ ").
    if (not name.strip() or name != name.strip() or folder in (".", "..") or "/" in folder
            or "\\" in folder or any(ord(c) < 32 for c in folder)):
        raise ServesimError(f"scenario name {name!r} cannot name a folder under out/ (no '/', "
                            "'\\', '..', control characters, or spaces at either end); "
                            "rename the scenario or give --out DIR", source, "name")
    if len(folder.encode("utf-8", "surrogateescape")) > MAX_FOLDER_BYTES:
        raise ServesimError(f"scenario name {shorten(name)!r} ({len(name):,} characters) is "
                            f"too long to name a folder under out/: at most "
                            f"{MAX_FOLDER_BYTES} bytes{' with ' + repr(suffix) if suffix else ''}"
                            ", as file systems take 255 and the run's .tmp-<pid> folder "
                            "beside it adds 15; rename the scenario or give --out DIR",
                            source, "name")
    return Path("out") / folder


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename.

    The data is flushed to disk before the rename, so after a crash ``path`` is either
    absent, its previous version, or complete; an interrupted write removes the
    temporary file instead of leaving it behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_meta(csv_path: Path, rows: str, columns: list[str], simulated: dict[str, Any],
               varied: dict[str, Any] | None = None) -> Path:
    """Write the description of the CSV at ``csv_path`` (:func:`sim.report.csvmeta.meta_json`:
    what one row is, ``columns`` with their units, the resolved scenario ``simulated``
    and what a study ``varied``) beside it, atomically; its path."""
    path = meta_path(csv_path)
    write_atomic(path, meta_json(csv_path, rows, columns, simulated, varied))
    return path


def _fmt(values: np.ndarray) -> list[str]:
    # Nanosecond resolution; an event that did not happen is an empty cell.
    return ["" if v != v else f"{v:.9f}" for v in values.tolist()]


def _csv_cell(text: str) -> str:
    # RFC 4180 quoting, needed only for trace class labels (scenario names are plain).
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _class_cells(klass: np.ndarray | None, names: tuple[str, ...], n: int) -> list[str]:
    """Each request's class name (empty cells for a workload without classes)."""
    if klass is None:
        return [""] * n
    cells = [_csv_cell(x) for x in names]
    return [cells[k] for k in klass.tolist()]


CSV_CHUNK = 32768  # rows formatted at a time: peak memory stays near the output's size


def requests_csv(res: RunResult) -> bytes:
    """One row per request, in id order (times in seconds)."""
    lat = per_request(res)
    rq = res.requests
    parts = [(",".join(CSV_COLUMNS) + "\n").encode()]
    for a in range(0, len(rq), CSV_CHUNK):
        b = min(a + CSV_CHUNK, len(rq))
        s = slice(a, b)
        cols = [
            [str(i) for i in range(a, b)],
            _fmt(rq.arrival_s[s]),
            [str(v) for v in rq.prompt_tokens[s].tolist()],
            [str(v) for v in rq.output_tokens[s].tolist()],
            _fmt(res.first_sched[s]), _fmt(res.first_token[s]), _fmt(res.finish[s]),
            _fmt(lat["ttft"][s]), _fmt(lat["tpot"][s]), _fmt(lat["e2e"][s]),
            [str(v) for v in res.preemptions[s].tolist()],
            [str(v) if v >= 0 else "" for v in res.replica[s].tolist()],
            [STATUS_NAMES[v] for v in res.status[s].tolist()],
            [str(v) for v in res.reason[s].tolist()],
            _class_cells(None if rq.klass is None else rq.klass[s], rq.class_names, b - a),
        ]
        parts.append(("\n".join(",".join(row) for row in zip(*cols, strict=True))
                      + "\n").encode())
    return b"".join(parts)


def summary_json(summary: dict[str, Any]) -> bytes:
    """The summary as strict, stable JSON."""
    return (json.dumps(clean(summary), indent=2, allow_nan=False) + "\n").encode()


def table(summary: dict[str, Any]) -> str:
    """A human-readable table of the summary (latencies in milliseconds)."""
    lines = []
    rq = summary["requests"]
    lines.append(f"scenario {summary['scenario']}: policy {summary['policy']}, "
                 f"{summary['replicas']} replica(s)"
                 + (f" of {summary['data_parallel_ranks'] // summary['replicas']} data-parallel"
                    " ranks" if "data_parallel_ranks" in summary else "")
                 + f" on {summary['gpus']} GPU(s), "
                 f"span {summary['span_s']:.1f} s")
    if summary.get("cost_source"):
        lines.append(f"cost: {summary['cost_source']}")
    lines.extend(setup_lines(summary))
    reasons = ", ".join(f"{k} {v}" for k, v in rq["rejected_by_reason"].items())
    ended = "".join(f", {rq[k]} {k.replace('_', ' ')}" for k in ("timed_out", "failed")
                    if rq.get(k))
    if rq.get("not_arrived"):
        ended += f", {rq['not_arrived']} not arrived by the horizon (not part of the run)"
    lines.append(f"requests: {rq['total']} total, {rq['finished']} finished, "
                 f"{rq['rejected']} rejected{f' ({reasons})' if reasons else ''}, "
                 f"{rq['unfinished']} unfinished{ended}")
    # What building the workload changed or left out (a trace's dropped rows, a
    # transform, a closed loop's unsent requests): on screen too, not only in the JSON.
    lines.extend(f"workload: {note}" for note in summary.get("workload_notes", ()))
    lines.extend(f"note: {note}" for note in summary.get("simulated", {}).get("notes", ()))
    stats = list(summary["latency_s"]["ttft"])  # the percentiles asked, mean and max
    names = ("ttft", "tpot", "itl", "e2e", "queueing")
    # A column as wide as its label (p33.33333333) or its widest value needs.
    head, rows = right_columns(stats, [
        ["-" if d[k] is None else f"{d[k] * 1e3:.1f}" for k in stats]
        for d in (summary["latency_s"][name] for name in names)])
    lines.append(f"{'metric (ms)':<14}{head}")
    lines.append("-" * len(lines[-1]))
    lines.extend(f"{name:<14}{row}" for name, row in zip(names, rows, strict=True))
    pools = summary.get("simulated", {}).get("pools", {})
    chunks = sorted({p["stream_interval"] for p in pools.values()
                     if "stream_interval" in p})
    if chunks:  # ITL is then one gap a chunk, as a client of that server measures it
        lines.append(f"itl: one gap per streamed chunk of {'/'.join(map(str, chunks))} "
                     "tokens (stream_interval)")
    tp = summary["throughput"]
    slo = tp["slo"]
    slo_txt = ", ".join(f"{k}<={v}" for k, v in slo.items() if v is not None) or "none set"
    if "classes" in summary:
        slo_txt = "per class, below"
    offered = summary.get("saturation", {}).get("offered_rps")
    lines.append(f"throughput: {cell(tp['requests_per_s'], '.3f')} req/s"
                 + (f" (offered {offered:.3f})" if offered is not None and offered < 1e6
                    else f" (offered {offered:.3g})" if offered is not None else "") + ", "
                 f"{cell(tp['output_tokens_per_s'], '.1f')} output tok/s"
                 + (f" ({tp['output_tokens_per_s_per_gpu']:.1f} a GPU)"
                    if summary["gpus"] > 1 and tp.get("output_tokens_per_s_per_gpu") else "")
                 + (f", {tp['prompt_tokens_per_s']:.1f} prompt tok/s"
                    if tp.get("prompt_tokens_per_s") is not None else "") + "; goodput "
                 f"{cell(tp['goodput_requests_per_s'], '.3f')} req/s (SLO {slo_txt}; "
                 f"attainment {cell(tp['slo_attainment'], '.1%')})")
    b, kv = summary["batch"], summary["kv"]
    blocks = "/".join(str(x) for x in dict.fromkeys(kv["blocks_per_replica"]))
    unit = "rank" if "data_parallel_ranks" in summary else "replica"  # a rank's own blocks
    lines.append(f"batch: {b['iterations']} iterations, mean {cell(b['mean_seqs'], '.1f')} seqs "
                 f"/ {cell(b['mean_tokens'], '.1f')} tokens; KV: {blocks} "
                 f"blocks/{unit}, mean use {cell(kv['mean_utilization'], '.1%')}, peak "
                 f"{cell(kv['peak_utilization'], '.1%')}; preemptions {summary['preemptions']}")
    if b.get("over_budget_iterations"):
        lines.append(f"note: {b['over_budget_iterations']} iterations computed more than the "
                     f"{b['token_budget']}-token budget (every running sequence's decode or "
                     "verify, which vLLM and TensorRT-LLM would cut to the budget); lower "
                     "max_num_seqs or raise the budget for steps the server would run")
    pc = summary.get("prefix_cache")
    if pc is not None:
        lines.append(f"prefix cache: {pc['hit_tokens']} of {pc['prefill_tokens']} prefill "
                     f"tokens hit ({cell(pc['hit_rate'], '.1%')}), {pc['evictions']} "
                     "evictions"
                     + (f"; resumed after preemption: {pc['resumed_hit_tokens']} of "
                        f"{pc['resumed_prefill_tokens']} tokens found again"
                        if "resumed_prefill_tokens" in pc else "")
                     + (f"; {pc['note']}" if "note" in pc else ""))
    lines.extend(tier_lines(summary))
    sp = summary.get("speculative")
    if sp is not None:
        lines.append(spec_line(sp))
    lines.extend(memory_lines(summary.get("memory", {})))
    lines.extend(reliability_lines(summary))
    if "classes" in summary:
        lines.extend(class_table(summary["classes"]))
    if summary.get("stages"):
        lines.extend(stage_table(summary["stages"]))
    return "\n".join(lines)


def tier_lines(summary: dict[str, Any]) -> list[str]:
    """The host KV tier's line (none without one): its size a GPU and how it is written,
    the prefill tokens hit on the host and on the GPU, its traffic a GPU (the mean over
    replicas), entries dropped and the seconds iterations spent moving blocks."""
    kt = summary.get("kv_tiers")
    if kt is None:
        return []
    g, h = kt["gpu"], kt["host"]
    pools = summary.get("simulated", {}).get("pools", {}).values()
    ways = {p["kv_offload"].get("write_policy", "write_back") for p in pools
            if p.get("kv_offload")}

    def mean(xs: list[float]) -> float:
        return sum(xs) / len(xs) if xs else 0.0

    size = "/".join(dict.fromkeys(f"{v:.3g}" for v in h["gib_per_gpu"]))
    return [f"host tier: {size} GiB a GPU ({', '.join(sorted(ways)).replace('_', '-')}); "
            f"{cell(h['hit_rate'], '.1%')} of prefill tokens hit there, "
            f"{cell(g['hit_rate'], '.1%')} on the GPU; "
            f"{mean(h['loaded_gib_per_gpu']):.1f} GiB loaded and "
            f"{mean(h['stored_gib_per_gpu']):.1f} GiB stored a GPU; "
            f"{h['dropped_entries']} entries dropped; {kt['transfer_s']:.3g} s of "
            "iterations moving blocks"]


def spec_line(sp: dict[str, Any]) -> str:
    """The ``speculative:`` line: the mean tokens a verify emitted against what the
    acceptance expects; with per-class acceptances, against the classes' expectation
    weighted by their verifies, then each class's mean against its own acceptance's."""
    head = (f"speculative: {sp['method']}, {sp['num_tokens']} drafted; "
            f"{cell(sp['mean_tokens_per_verify'], '.3f')} tokens a verify over "
            f"{sp['verifies']} verifies ")
    tail = f"; drafting: {sp['draft_cost']}"
    if "expected_tokens_per_verify_of_classes" not in sp:
        return (head + f"(acceptance {_phrase(sp['acceptance'])} expects "
                f"{sp['expected_tokens_per_verify']:.3f})" + tail)
    keys = ("rate", "mean_length", "distribution")
    parts = [f"{name} {cell(c['mean_tokens_per_verify'], '.3f')} over {c['verifies']} verifies "
             f"(acceptance {_phrase({k: c[k] for k in keys if k in c})} expects "
             f"{c['expected_tokens_per_verify']:.3f})" for name, c in sp["classes"].items()]
    return (head + "(the classes' acceptances expect "
            f"{cell(sp['expected_tokens_per_verify_of_classes'], '.3f')}); per class, over "
            "its finished requests: " + ", ".join(parts) + tail)


def _phrase(given: dict[str, Any]) -> str:
    """A setting's keys and values as words (``rate 0.7``), lists comma-joined."""
    return ", ".join(f"{k.replace('_', ' ')} "
                     + (", ".join(f"{x:g}" for x in v) if isinstance(v, list | tuple)
                        else f"{v:g}" if isinstance(v, float) else str(v))
                     for k, v in given.items())


def nothing_finished(summary: dict[str, Any]) -> str | None:
    """Why a run that finished no request is no result (its counts and the rejection
    reasons), or None when some request finished."""
    rq = summary["requests"]
    if rq["finished"]:
        return None
    if not rq["total"]:
        return "the workload sent no request"
    reasons = ", ".join(f"{k} {v}" for k, v in rq["rejected_by_reason"].items())
    ended = "".join(f", {rq[k]} {k.replace('_', ' ')}" for k in ("unfinished", "timed_out",
                                                                 "failed", "not_arrived")
                    if rq.get(k))
    return (f"no request finished: {rq['rejected']} of {rq['total']} rejected"
            f"{f' ({reasons})' if reasons else ''}{ended}; the outputs were written, "
            "requests.csv gives each request's reason")


def setup_lines(summary: dict[str, Any]) -> list[str]:
    """A closed loop's clients and a priced frontend (ms), when the run had them."""
    out = []
    w = summary.get("workload")
    if w:
        unsent = f", {w['requests_not_sent']} not sent" if w["requests_not_sent"] else ""
        n = w["concurrency"]
        out.append(f"closed loop: {n} client{'s' if n != 1 else ''}, think time "
                   f"{w['think_time_s']:g} s; {w['requests_sent']} requests sent{unsent}")
        if w.get("paced"):
            out.append(f"paced clients: {w['requests_held']} requests waited for a free "
                       f"client past their due time (mean {ms(w['client_wait_mean_s'])}, "
                       f"max {ms(w['client_wait_max_s'])}; not in the latencies, which "
                       "start at the send)")
    f = summary.get("frontend")
    if f:
        out.append(f"frontend: {f['request_s'] * 1e3:.3g} ms + "
                   f"{f['per_prompt_token_s'] * 1e3:.3g} ms per prompt token + "
                   f"{f.get('jitter_s', 0) * 1e3:.3g} ms mean jitter in, "
                   f"{f['response_s'] * 1e3:.3g} ms out")
    return out


def memory_lines(memory: dict[str, dict[str, Any]]) -> list[str]:
    """One line per pool: a GPU's memory as vLLM divides it (GiB) and the KV capacity."""
    return [f"memory/GPU{'' if role == 'both' else f' ({role})'}: {memory_terms(m)}"
            for role, m in memory.items()]


def reliability_lines(summary: dict[str, Any]) -> list[str]:
    """The saturation verdict when saturated, and the faults' counts and latency impact
    (E2E p50/p99 in ms of requests placed again against the rest) when faults are set."""
    out = []
    sat = summary.get("saturation")
    if sat and sat["saturated"]:
        growth, offered = sat["queue_growth_rps"], sat["offered_rps"]
        g = "-" if growth is None else f"{growth:.2f}"
        o = "-" if offered is None else f"{offered:.2f}"
        out.append(f"SATURATED: waiting queue grows {g} req/s at {o} req/s offered; "
                   f"{sat['refused_fraction']:.1%} refused or abandoned")
        held = sat.get("client_backlog_growth_rps")
        if held is not None:
            out[-1] += (f"; requests held at the clients grow {held:.2f} req/s at "
                        f"{sat['due_rps']:.2f} req/s due")
    f = summary.get("faults")
    if f:
        lat = f["latency_s"]

        def ms(group: str, k: str) -> str:
            v = lat[group]["e2e"][k]
            return "-" if v is None else f"{v * 1e3:.0f}"

        out.append(f"faults: {f['outages']} outage(s), {f['downtime_s']:.0f} s down; "
                   f"{f['requests_lost']} lost, {f['requests_retried']} retried, "
                   f"{f['requests_failed']} failed; e2e p50/p99 ms affected "
                   f"{ms('affected', 'p50')}/{ms('affected', 'p99')}, others "
                   f"{ms('unaffected', 'p50')}/{ms('unaffected', 'p99')}")
    return out


def class_table(classes: dict[str, Any]) -> list[str]:
    """Lines of the per-class block: counts, TTFT/TPOT/E2E percentiles (ms), goodput
    (req/s), SLO attainment and each class's targets."""
    cols = ("requests", "done", "ttft p50", "ttft p99", "tpot p50", "tpot p99", "e2e p99",
            "goodput", "attain")
    width = left_width(12, [f"{n} " for n in classes])
    cells, slos = [], []
    for c in classes.values():
        lat, tp, rq = c["latency_s"], c["throughput"], c["requests"]
        cells.append([str(rq["total"]), str(rq["finished"]), ms_cell(lat["ttft"], "p50"),
                      ms_cell(lat["ttft"], "p99"), ms_cell(lat["tpot"], "p50"),
                      ms_cell(lat["tpot"], "p99"), ms_cell(lat["e2e"], "p99"),
                      cell(tp["goodput_requests_per_s"], ".3f"),
                      cell(tp["slo_attainment"], ".1%")])
        slos.append(", ".join(f"{k[:-2]}<={v:g}" for k, v in tp["slo"].items()
                              if v is not None) or "none set")
    head, rows = right_columns(cols, cells)
    lines = [f"{'class':<{width}}{head}  SLO (s)"]
    lines.append("-" * len(lines[0]))
    lines += [f"{name:<{width}}{row}  {slo}"
              for name, row, slo in zip(classes, rows, slos, strict=True)]
    return lines


RUN_FILES = ("summary.json", "requests.csv")  # what marks a folder as a run's outputs
REQUESTS_ROWS = "one row per request, in id order"


def run_title(summary: dict[str, Any]) -> str:
    """``quickstart: Llama-3-8B on 1× H100-SXM (tp 1), chunked; cost: ...``: what a
    run simulated, for its plots' and report's titles."""
    sim = summary["simulated"]
    return (f"{summary['scenario']}: {setup_phrase(sim)}, {summary['policy']}; "
            f"cost: {cost_phrase(sim)}")


def write_run(res: RunResult, summary: dict[str, Any], out_dir: Path,
              plots: bool = True) -> list[Path]:
    """Write requests.csv, summary.json and (optionally) the CDF plot into a temporary
    folder that then replaces ``out_dir`` whole (:mod:`sim.report.folder`; the scenario
    file, if it lies in ``out_dir``, is kept); return the final paths."""
    names = ["requests.csv", "summary.json"]
    with replaced_folder(out_dir, RUN_FILES, inputs=input_files(res.scenario)) as stage:
        write_atomic(stage / names[0], requests_csv(res))
        names.append(write_meta(stage / names[0], REQUESTS_ROWS, list(CSV_COLUMNS),
                                summary["simulated"]).name)
        write_atomic(stage / names[1], summary_json(summary))
        if plots:
            names.append("ttft_tpot_cdf.png")
            plot_cdfs({res.scenario.name: res}, stage / names[-1], run_title(summary))
            if res.requests.stage_windows is not None:
                names.append("latency_over_time.png")
                plot_over_time(res, stage / names[-1])
    return [out_dir / n for n in names]


def write_compared(out_dir: Path, label: str, runs: dict[str, RunResult],
                   plot: dict[str, RunResult] | None) -> list[Path]:
    """Two or more runs of the same requests side by side: ``NAME-LABEL.csv`` per run
    of ``runs`` (name -> run) and, given ``plot`` (legend -> run), ``cdf-LABEL.png``
    with their CDFs overlaid; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, res in runs.items():
        paths.append(out_dir / f"{name}-{label}.csv")
        write_atomic(paths[-1], requests_csv(res))
    if plot:
        paths.append(out_dir / f"cdf-{label}.png")
        plot_cdfs(plot, paths[-1])
    return paths
