"""Numbers and names for people: what reports and one-sentence answers print.

Latencies arrive in seconds and leave in milliseconds with as many decimals as their
size deserves (367 ms, 34.7 ms, 8.53 ms); token and request rates get thousands
separators (2,432 tok/s) and never scientific notation. Preset model and GPU names are
written as their makers write them (Llama-3-8B, H100-SXM); a model the user named is
left as given. The setup phrase (model, GPUs, tp, cost source) is built from a
summary's ``simulated`` section (:func:`sim.report.setup.simulated`).
"""

from __future__ import annotations

import re
from typing import Any

DASH = "–"  # an undefined value (no request had it)


def ms(seconds: float | None) -> str:
    """``seconds`` as milliseconds, three significant figures up to 1 s (``367 ms``,
    ``34.7 ms``, ``8.53 ms``), whole milliseconds with separators above (``11,302 ms``)."""
    if seconds is None:
        return DASH
    v = seconds * 1e3
    if abs(v) >= 100:
        return f"{v:,.0f} ms"
    if abs(v) >= 10:
        return f"{v:.1f} ms"
    if abs(v) >= 1:
        return f"{v:.2f} ms"
    return f"{v:.3f} ms"


def number(v: float | None, unit: str = "") -> str:
    """A rate or count with thousands separators and no exponent: three significant
    figures below 100 (``11.2``, ``0.412``), whole numbers above (``2,432``)."""
    if v is None:
        return DASH
    if abs(v) >= 100:
        text = f"{v:,.0f}"
    elif v == 0:
        text = "0"
    else:
        # Three significant figures, written out positionally (never 1.2e-05).
        digits = max(0, 2 - int(_floor_log10(abs(v))))
        text = f"{v:,.{digits}f}"
    return f"{text} {unit}".rstrip()


def _floor_log10(x: float) -> int:
    import math

    return math.floor(math.log10(x))


def req_s(v: float | None) -> str:
    """Requests per second (``11.2 req/s``)."""
    return number(v, "req/s")


def tok_s(v: float | None) -> str:
    """Tokens per second (``2,432 tok/s``)."""
    return number(v, "tok/s")


def pct(fraction: float | None) -> str:
    """A fraction 0-1 as a percentage with one decimal (``99.6%``); near but below 100%
    with two (``99.96%``), so that a miss never reads as ``100.0%``."""
    if fraction is None:
        return DASH
    if 0.9995 <= fraction < 1:
        return f"{fraction:.2%}" if fraction < 0.99995 else ">99.99%"
    return f"{fraction:.1%}"


def count(n: float | None) -> str:
    """A whole count with thousands separators (``10,108``)."""
    return DASH if n is None else f"{int(n):,}"


# Families whose makers capitalise more than the first letter.
_MAKER_SPELLING = {"deepseek": "DeepSeek"}
# Parts of a preset's name written in capitals: sizes (8b, 8x7b, a22b), formats (fp8)
# and DeepSeek's release names (v3, r1).
_UPPER_PART = re.compile(r"(\d+x)?[a-z]?\d+(\.\d+)?[bmt]|fp\d+|awq|gptq|[vr]\d+")


def model_name(name: str) -> str:
    """A preset model's name as its maker writes it (``llama-3-8b`` -> ``Llama-3-8B``,
    ``qwen3-30b-a3b`` -> ``Qwen3-30B-A3B``); any other name unchanged."""
    from sim.cost.presets import MODELS

    if name not in MODELS or name in ("tiny", "tiny-moe"):
        return name
    parts = name.split("-")
    out = [_MAKER_SPELLING.get(parts[0], parts[0][:1].upper() + parts[0][1:])]
    out += [p.upper().replace("X", "x") if _UPPER_PART.fullmatch(p) else p for p in parts[1:]]
    return "-".join(out)


def gpu_name(name: str) -> str:
    """A GPU's name as printed on it (``h100-sxm`` -> ``H100-SXM``)."""
    return name.upper()


def setup_phrase(simulated: dict[str, Any], tps: list[int] | None = None) -> str:
    """``Llama-3-8B on 2× H100-SXM (2 replicas × tp 1)`` from a ``simulated`` section;
    a disaggregated cluster names each pool; ``tps`` (a sweep's tp degrees) replaces the
    scenario's own tp and GPU count when given."""
    model = model_name(str(simulated["model"]["name"]))
    pools = simulated["pools"]
    parts = []
    for role, p in pools.items():
        gpu = gpu_name(str(p["gpu"]))
        if tps and role == "both":
            parts.append(f"{gpu} (tp {', '.join(map(str, tps))})")
            continue
        pp, dp = int(p.get("pp", 1)), int(p.get("dp", 1))
        n = int(p["replicas"]) * int(p["tp"]) * pp * dp
        shape = (f"tp {p['tp']}" if p["replicas"] == 1
                 else f"{p['replicas']} replicas × tp {p['tp']}")
        shape += (f" × pp {pp}" if pp > 1 else "") + (f" × dp {dp}" if dp > 1 else "")
        pool = "" if role == "both" else f"{role} "
        parts.append(f"{n}× {gpu} ({pool}{shape})")
    return f"{model} on {' + '.join(parts)}"


def setup_with_cost(simulated: dict[str, Any], tps: list[int] | None = None) -> str:
    """:func:`setup_phrase` with the cost source inside its closing parenthesis:
    ``Llama-3-8B on 1× H100-SXM (tp 1; measured kernels: vLLM 0.24.0 on H100-SXM)``."""
    text = setup_phrase(simulated, tps)
    if len(simulated["pools"]) > 1:  # the last parenthesis is one pool's
        return f"{text}, cost: {cost_phrase(simulated)}"
    return f"{text[:-1]}; {cost_phrase(simulated)})"


def cost_phrase(simulated: dict[str, Any]) -> str:
    """Where the step prices come from, as the run recorded it."""
    return str(simulated.get("cost_source") or "unknown cost model")


def memory_terms(m: dict[str, Any]) -> str:
    """One pool's memory as vLLM divides one GPU (GiB) and the KV capacity, in one line:
    a ``memory`` entry of a summary (:meth:`sim.cost.memorybudget.MemoryBudget.summary`)."""
    kv = (f"KV {m['kv_gib']:.2f} GiB = {m['kv_blocks']} blocks"
          if m["kv_blocks_from"] == "memory" else
          f"KV set by num_gpu_blocks: {m['kv_blocks']} blocks ({m['kv_gib']:.2f} GiB)")
    return (f"{m['total_gib']:.2f} GiB x {m['utilization']:g} - "
            f"weights {m['weights_gib']:.2f} - activation {m['activation_gib']:.2f} - "
            f"non-torch {m['non_torch_gib']:.2f} - CUDA graphs {m['cuda_graph_gib']:.2f}"
            + (f" - linear-attention states {m['linear_state_gib']:.2f} "
               f"({m['linear_state_seqs']} sequences, the most that run"
               + (f", {m['linear_state_copies']} states each for speculative decoding"
                  if "linear_state_copies" in m else "") + ")"
               if "linear_state_gib" in m else "")
            + f" -> {kv}, {m['kv_tokens']} tokens"
            + (f" (and each request's sliding-window layers, up to "
               f"{m['window_blocks_per_request']} blocks of them)"
               if "window_blocks_per_request" in m else "")
            + (f" (and each running request's linear-attention states, "
               f"{m['linear_state_blocks_per_request']} blocks of them"
               + (f": {m['linear_state_copies']} states for speculative decoding"
                  if "linear_state_copies" in m else "") + ")"
               if "linear_state_blocks_per_request" in m else "")
            + (f"; {m['sized']}" if m.get("sized") else ""))
