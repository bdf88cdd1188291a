"""The table a run prints: latencies, throughput, the setup simulated and its cost
source, KV and memory terms, host tier, speculation, reliability, and a per-class and
per-stage block where the run has them; and the one line that says a run finished
nothing. The files a run writes are :mod:`sim.report.outputs`'.
"""

from __future__ import annotations

from typing import Any

from sim.report.human import memory_terms, ms
from sim.report.stagereport import stage_table
from sim.report.texttable import cell, left_width, ms_cell, right_columns


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
    arrived = rq["total"] - (rq.get("not_arrived") or 0)
    if 0 < rq["finished"] < arrived / 2:
        # A horizon, a fault or timeouts left most requests without a latency: the table
        # is of the few that finished, which its numbers alone would not say.
        lines.append(f"note: only {rq['finished']} of the {arrived} arrived requests "
                     "finished; the latencies below are theirs alone")
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
                 f"{cell(kv['peak_utilization'], '.1%')}; preemptions {summary['preemptions']}"
                 + swap_phrase(summary.get("swap")))
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


def swap_phrase(sw: dict[str, Any] | None) -> str:
    """The preemptions' split under ``preemption: swap`` ("" without it), so that a run
    whose host swap space filled says how many preempted requests recomputed instead."""
    if not sw or not (sw["swapped"] or sw["recomputed"]):
        return ""
    return (f" ({sw['swapped']} swapped to host memory, {sw['recomputed']} recomputed: "
            "the swap space had no room or nothing was computed)" if sw["recomputed"]
            else " (all swapped to host memory)")


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

        late = f.get("planned_after_run", 0)
        after = f" ({late} planned to begin after the run ended: none happened)" if late else ""
        out.append(f"faults: {f['outages']} outage(s){after}, {f['downtime_s']:.0f} s down; "
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
