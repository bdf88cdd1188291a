"""Pieces every ``servesim report`` document shares: its types, the title line, SLO and
percentile wording, and the table of what was simulated (:func:`setup_table`)."""

from __future__ import annotations

from typing import Any

from sim.report import human as h

Row = dict[str, Any]
Doc = dict[str, Any]
# (header, rows, indices of saturated rows)
Table = tuple[list[str], list[list[str]], set[int]]


def heading(kind: str, name: str | None, sim: dict[str, Any] | None,
             tps: list[int] | None = None) -> tuple[str, str]:
    """Title (scenario, model, GPUs, tp) and subtitle (command, cost source)."""
    if sim is None:  # a folder written before runs recorded what they simulated
        return (f"servesim {kind}: {name or 'scenario'}",
                "model, GPU and cost source not recorded")
    title = f"{name or 'scenario'}: {h.setup_phrase(sim, tps)}, cost: {h.cost_phrase(sim)}"
    return title, f"servesim {kind} · scenario file {sim.get('file')}"


def slo_text(slo: dict[str, Any]) -> str:
    parts = [f"{k[:-2].upper()} ≤ {v * 1e3:g} ms" for k, v in slo.items() if v is not None]
    return " and ".join(parts)


def pick(d: dict[str, Any], want: str, last: bool) -> str:
    """``want`` (``p50``, ``p99``) when the summary has it, else its lowest or highest
    percentile (a run given other ``--percentiles``)."""
    if want in d:
        return want
    ps = [k for k in d if k.startswith("p")]
    return ps[-1] if last else ps[0]


# ---------------------------------------------------------------------- setup
def _settings(section: dict[str, Any]) -> str:
    """A section's settings as ``key value`` pairs; nested ones in braces."""
    def one(v: Any) -> str:
        if isinstance(v, dict):
            return "{" + ", ".join(f"{k} {one(x)}" for k, x in v.items()) + "}"
        if isinstance(v, list):
            return "[" + "; ".join(one(x) for x in v) + "]"
        return f"{v:g}" if isinstance(v, float) else str(v)
    return ", ".join(f"{k} {one(v)}" for k, v in section.items())


def _features(pool: dict[str, Any]) -> str:
    """A pool's serving features beyond plain batching (a ``simulated`` pool's optional
    keys), in words; "" when it has none."""
    keys = ("speculative", "prefix_caching", "preemption", "priority", "kv_offload",
            "scheduler_recv_interval")
    parts = []
    for k in keys:
        if k not in pool:
            continue
        v = pool[k]
        parts.append(k.replace("_", " ") if v is True else
                     f"{k.replace('_', ' ')} {_settings(v) if isinstance(v, dict) else v}")
    return "; ".join(parts)


def setup_table(sim: dict[str, Any], memory: dict[str, Any] | None = None) -> Table:
    """The resolved scenario (a ``simulated`` section) as rows of setting and value, with
    each pool's GPU memory terms where a run's ``memory`` section is given."""
    m = sim["model"]
    dims = ", ".join(f"{k} {m[k]}" for k in ("layers", "hidden", "heads", "kv_heads",
                                             "head_dim", "intermediate", "vocab") if k in m)
    rows = [["model", f"{h.model_name(str(m['name']))} ({dims}; weights {m.get('dtype')}, "
                      f"KV {m.get('kv_dtype')}; context {h.count(m.get('max_context'))})"]]
    for role, p in sim["pools"].items():
        pool = "" if role == "both" else f" ({role})"
        budget = "none" if p["token_budget"] is None else p["token_budget"]
        limits = (f"max_num_seqs {p['max_num_seqs']}, max_num_batched_tokens "
                  f"{p['max_num_batched_tokens']}, token budget {budget}, "
                  f"block size {p['block_size']}, watermark {p['watermark']:g}")
        if p.get("long_prefill_token_threshold"):
            limits += f", long_prefill_token_threshold {p['long_prefill_token_threshold']}"
        if p.get("stream_interval"):  # ITL is then one gap a streamed chunk
            limits += f", stream_interval {p['stream_interval']} (ITL per chunk)"
        rows.append([f"cluster{pool}", f"{p['replicas']} replica(s) × tp {p['tp']} on "
                                       f"{h.gpu_name(str(p['gpu']))}, router {p['router']}"])
        rows.append([f"serving{pool}", f"{p['policy']}: {limits}"])
        features = _features(p)
        if features:
            rows.append([f"serving features{pool}", features])
        if p.get("kv_blocks_per_replica"):
            blocks = sorted(set(p["kv_blocks_per_replica"]))
            rows.append([f"KV blocks per replica{pool}", ", ".join(h.count(b) for b in blocks)])
        m = (memory or {}).get(role)
        if isinstance(m, dict) and "weights_gib" in m:
            # The printed summary's own line, so the report shows every term it does.
            rows.append([f"GPU memory{pool}", h.memory_terms(m)])
    for key in ("admission", "faults"):
        if sim.get(key):
            rows.append([key, _settings(sim[key])])
    rows += [["not priced", note] for note in sim.get("notes", ())]
    rows += [["cost source", h.cost_phrase(sim)],
             ["workload seed", str(sim.get("seed"))],
             ["horizon", "none" if sim.get("horizon_s") is None
              else f"{h.number(sim['horizon_s'])} s"],
             ["scenario file", str(sim.get("file"))],
             ["--set overrides", "; ".join(sim.get("overrides") or []) or "none"],
             ["scenario digest (SHA-256)", str(sim.get("sha256"))],
             ["servesim version", str(sim.get("servesim_version"))]]
    return ["setting", "value"], rows, set()
