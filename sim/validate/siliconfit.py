"""Public end-to-end runs simulated, the errors against their measurements, and the fit
of the priors for what kernel tables do not measure (``servesim validate --silicon``;
its command line: :mod:`sim.validate.siliconcli`).

Each row servesim can model (:func:`sim.validate.silicon.classify`) is simulated with a profile
built from the installed tables for its framework, GPU, model and tp. With
``--fit-priors FILE`` the per-framework priors (:mod:`sim.cost.priors`: a step's fixed and
per-sequence overhead, the frontend's per-request latency) are fitted on the rows not
held out and written to FILE; the report gives the errors of the held-out rows apart.

The fit: the priors shift every step and request by small, fixed amounts, so each
row's mean TTFT and TPOT are close to linear in them. Each training row is simulated
at zero priors and once per prior at a small step, which gives that linear model;
the priors minimise a robust (soft-L1) sum of relative errors over TTFT and TPOT,
each ≥ 0; then every row is simulated again at the fitted priors, and only those
full simulations are reported.
"""

from __future__ import annotations

import dataclasses
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from sim.cost.dtypes import FOUR_BIT_WEIGHTS
from sim.cost.eager import default_graphs, floored
from sim.cost.frontend import Frontend
from sim.cost.gpus import gpu
from sim.cost.overlap import HostOverlap
from sim.cost.priors import KEYS, LENGTHS, Priors
from sim.cost.profilecost import ProfileCost
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.validate.silicon import Case
from sim.validate.siliconpredict import predict
from sim.validate.siliconrecipes import capture_tokens

# How fitted priors name the installed sample (another CSV: the path it was given as).
DATA = "silicon_sample.csv"
# The priors fitted, and the step each is moved by for the linear model (seconds).
FITTED = ("step_const_s", "step_per_seq_s", "request_s")
STEPS = {"step_const_s": 1e-3, "step_per_seq_s": 1e-5, "request_s": 1e-2}


@lru_cache(maxsize=64)
def base_cost(framework: str, gpu: str, model: ModelSpec, tp: int, ep: int = 1,
              moe_backend: str = "auto", dp: int = 1) -> ProfileCost:
    """The profile built from the installed tables for one configuration (expert
    parallelism ``ep``, MoE kernel ``moe_backend``, ``dp`` data-parallel attention ranks
    of ``tp`` GPUs), priors zero."""
    from sim.cost.profilefile import parse_profile
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    data = build_profile(BuildSpec(model, gpu, framework, tp, ep=ep, moe_backend=moe_backend,
                                   dp=dp), Priors())
    variant = (f" dp{dp}" if dp > 1 else "") + (f" ep{ep}" if ep > 1 else "") + \
        (f" moe {moe_backend}" if moe_backend != "auto" else "")
    return parse_profile(data, f"<built {framework} {gpu} {model.name} {model.dtype} "
                               f"kv {model.kv_dtype} "
                               f"tp{tp}{variant}>")


def with_priors(cost: ProfileCost, p: Priors) -> ProfileCost:
    """``cost`` with the step and frontend priors of ``p``."""
    coefs = {k: dict(v) for k, v in cost.coefs.items()}
    coefs["step"].update(const_s=p.step_const_s, per_seq_s=p.step_per_seq_s)
    return cost.replace(coefs=coefs, frontend=Frontend(
        request_s=p.request_s, per_prompt_token_s=p.per_prompt_token_s,
        response_s=p.response_s, jitter_s=p.jitter_s))


# Frameworks whose InferenceX recipe overlaps the engine's host work with the GPU's:
# vLLM's runs pass --async-scheduling (the next step is scheduled and its inputs prepared
# while the current one runs), so a step costs the longer of its host work (the step
# priors, fitted on AIConfigurator's vLLM 0.12.0 runs, which ran without it) and its
# device work (sim/cost/overlap.py). TensorRT-LLM overlaps by default in both
# collections, so its fitted step priors are what is left after the overlap.
OVERLAPPED_HOST = frozenset({"vllm"})


def _cost(case: Case, p: Priors) -> Any:
    """``case``'s profile with the priors ``p`` as the row's run had them: its
    collection's per-request latency (:meth:`Priors.for_collection`), and its host work
    overlapped with the device where the run did so (:data:`OVERLAPPED_HOST`)."""
    p = p.for_collection(case.row.collection)
    cost = with_priors(base_cost(case.framework, case.gpu, case.spec, case.tp, case.ep,
                                 case.moe_backend, case.dp), p)
    # The steps the row's release ran without CUDA graphs (sim/cost/eager.py).
    capture = capture_tokens(case) if case.framework == "vllm" else 0
    cost = floored(cost, default_graphs(case.framework, case.row.version, case.spec,
                                        gpu(case.gpu), case.row.tp, capture), case.spec)
    if case.row.collection == "inferencex" and case.framework in OVERLAPPED_HOST:
        return HostOverlap(cost)
    return cost


# The silicon CSV column each ``servesim profile build`` flag of a row's profile comes
# from: an error building it names the column, not a flag the user never gave.
FLAG_COLUMNS = {"--tp": "tp_size", "--ep": "moe_ep_size", "--dp": "attention_dp_size",
                "--gpu": "system", "--model": "model_path", "--version": "backend_version",
                "--dtype": "precision", "--expert-dtype": "precision",
                "--qkv-dtype": "precision"}


def _predict(case: Case, p: Priors) -> tuple[float, float, str]:
    """:func:`predict` of ``case`` at the priors ``p``; an error naming the row's file,
    line and column where the row cannot be simulated (a tp_size its model's heads do
    not split over)."""
    try:
        return predict(case, _cost(case, p))
    except ServesimError as exc:
        column = FLAG_COLUMNS.get(exc.where or "")
        where = f"line {case.row.line}" + (f", {column}" if column else "")
        why = exc.message if column or not exc.where else f"{exc.where}: {exc.message}"
        raise ServesimError(f"cannot simulate the row: {why}", source=case.row.file or None,
                            where=where) from None


def fit_priors(cases: list[Case], framework: str, data: str, keys: tuple[str, ...] = FITTED,
               held: Priors | None = None) -> tuple[Priors, int]:
    """Priors of ``framework`` fitted on ``cases`` (see the module doc), rows of the CSV
    named ``data``; and the number of rows used. Only ``keys`` are fitted; the others
    keep ``held``'s values (zeros)."""
    zeros: dict[str, Any] = dict.fromkeys(keys, 0.0)
    zero = dataclasses.replace(held or Priors(), **zeros)
    y0, cols, meas = [], [], []
    for c in cases:
        t0 = np.array(_predict(c, zero)[:2])
        jac = []
        for key in keys:
            step: dict[str, Any] = {key: STEPS[key]}
            moved = _predict(c, dataclasses.replace(zero, **step))[:2]
            jac.append((np.array(moved) - t0) / STEPS[key])
        y0.append(t0)
        cols.append(np.stack(jac, axis=1))
        meas.append([c.row.ttft_ms, c.row.tpot_ms])
    base, jacobian, truth = np.concatenate(y0), np.concatenate(cols), np.concatenate(meas)
    ok = np.isfinite(base) & np.isfinite(truth) & np.all(np.isfinite(jacobian), axis=1)
    if not ok.any():
        # A simulation that finished no request has no latency to fit to.
        raise ServesimError(f"none of the {len(cases)} {framework} rows to fit on finished a "
                            "request when simulated: nothing to fit the priors to",
                            source=data, where="--fit-priors")
    scale = np.array([STEPS[k] for k in keys])

    # Each prior in units of its step, so all move the errors by similar amounts.
    slope = jacobian[ok] * scale / truth[ok][:, None]

    def residual(z: np.ndarray) -> np.ndarray:
        return base[ok] / truth[ok] - 1.0 + slope @ z

    res = least_squares(residual, np.ones(len(keys)), jac=lambda z: slope,
                        bounds=(0, np.inf), loss="soft_l1", f_scale=0.1)
    # A prior the fit drives to its bound comes out a hair above zero: it is zero.
    values: dict[str, Any] = {k: float(v) if v > 1e-6 * STEPS[k] else 0.0
                              for k, v in zip(keys, res.x * scale, strict=True)}
    return dataclasses.replace(zero, **values, source=f"fitted on {len(cases)} {framework} "
                                                      f"rows of {data}"), len(cases)


def with_lengths(cases: list[Case], lengths: str) -> list[Case]:
    """``cases`` with the rows of AIConfigurator's own collection drawn as ``lengths``
    (InferenceX rows keep their documented [0.8 L, L])."""
    return [dataclasses.replace(c, lengths=lengths if c.row.collection == "aic" else "ranged")
            for c in cases]


def _score(records: list[dict[str, Any]]) -> float:
    """Mean of the median |relative error| of TTFT and of TPOT."""
    return float(np.mean([np.nanmedian(np.abs([r[f"{m}_err"] for r in records]))
                          for m in ("ttft", "tpot")]))


def fit_framework(cases: list[Case], framework: str, data: str) -> tuple[Priors, int, str]:
    """Priors of ``framework`` and how its AIConfigurator-collected clients drew lengths,
    fitted on ``cases`` (the rows not held out of the CSV named ``data``), in two parts:

    - the engine's step priors, with the per-request latency of AIConfigurator's own
      harness, on AIConfigurator's rows: fitted under each length model, and the one
      whose rows come out closer is kept;
    - the per-request latency of the engine's own server under vLLM's benchmark client,
      on InferenceX's rows, the step priors held at the first part's values (the step
      is the engine's, whatever serves it; overlapped with the device where the run did so,
      :data:`OVERLAPPED_HOST`). Without InferenceX rows it is not fitted: zero, the
      first part's kept as ``aic_request_s`` for AIConfigurator's rows.
    """
    aic = [c for c in cases if c.row.collection == "aic"]
    plain = [c for c in cases if c.row.collection == "inferencex"]
    best: tuple[float, Priors, str] | None = None
    for lengths in LENGTHS if aic else ():
        trial = with_lengths(aic, lengths)
        p, _ = fit_priors(trial, framework, data)
        score = _score(evaluate(trial, {framework: p}))
        if best is None or score < best[0]:
            best = (score, dataclasses.replace(p, aic_client_lengths=lengths), lengths)
    engine = best[1] if best is not None else Priors(source="none fitted: zero")
    lengths = best[2] if best is not None else LENGTHS[0]
    if not plain:
        if not aic:
            return engine, len(cases), lengths
        # The harness's latency is not the plain server's: where both were fitted it is
        # four times vLLM's and TensorRT-LLM's. With nothing to fit the server's on, it is
        # left at zero, and the source says so.
        source = (f"step priors and AIConfigurator's harness latency fitted on {len(aic)} "
                  f"{framework} rows of {data}; no plain-server rows, so the "
                  "server's own per-request latency is not fitted (0)")
        return dataclasses.replace(engine, request_s=0.0, aic_request_s=engine.request_s,
                                   source=source), len(cases), lengths
    q, _ = fit_priors(with_lengths(plain, lengths), framework, data, keys=("request_s",),
                      held=engine)
    source = (f"step priors fitted on {len(aic)} AIConfigurator {framework} rows, the "
              f"server's per-request latency on {len(plain)} InferenceX rows of {data}")
    return dataclasses.replace(engine, request_s=q.request_s, aic_request_s=engine.request_s,
                               source=source), len(cases), lengths


def write_priors(path: Path, fitted: dict[str, tuple[Priors, int, str]],
                 errors: dict[str, Any], data: str) -> None:
    """Write ``fitted`` (framework: priors, rows used, AIConfigurator clients' lengths)
    and the errors, fitted on rows of the CSV named ``data``."""
    frameworks: dict[str, Any] = {}
    whose = ("NVIDIA AIConfigurator's silicon_sample.csv (aiconfigurator-core, Apache-2.0; "
             "see NOTICE)" if data == DATA else data)
    doc = {"note": f"fitted by `servesim validate --silicon --fit-priors` on rows of {whose}; "
                   "docs/validation.md says how", "frameworks": frameworks}

    def rounded(x: Any) -> Any:
        if isinstance(x, dict):
            return {k: rounded(v) for k, v in x.items()}
        return float(f"{x:.4g}") if isinstance(x, float) else x
    for fw, (p, n, lengths) in sorted(fitted.items()):
        values = {k: float(f"{getattr(p, k):.6g}") for k in KEYS}
        if p.aic_request_s is not None:
            values["aic_request_s"] = float(f"{p.aic_request_s:.6g}")
        frameworks[fw] = {"source": p.source, "rows": n, "values": values,
                          "aic_client_lengths": lengths,
                          "errors": rounded(errors.get(fw, {}))}
    from sim.report.outputs import write_atomic

    try:
        write_atomic(path, yaml.safe_dump(doc, sort_keys=False, width=100).encode())
    except OSError as exc:
        raise ServesimError(f"cannot write the priors: {exc.strerror}",
                            where=f"--fit-priors {path}") from None


# What makes two records one measured run: its setup and both measured means. The
# model's name is not among them: InferenceX's exports label some DeepSeek runs R1 in
# one file and V3 in another (one architecture, every figure equal to the last digit).
RUN_FIELDS = ("framework", "version", "gpu", "tp", "ep", "dp", "isl", "osl", "concurrency",
              "dtype", "expert_dtype", "qkv_dtype", "kv_dtype", "linear_layers", "ttft_ms",
              "tpot_ms")


def run_key(record: dict[str, Any]) -> tuple[Any, ...]:
    """The measured run a record is of (:data:`RUN_FIELDS`): a CSV that exports one run
    under several ids gives several records with one key. Times are compared to nine
    significant digits, as exports of one run differ in the last bit of a mean."""
    return tuple(float(f"{v:.9g}") if isinstance(v, float) else v
                 for v in (record.get(k) for k in RUN_FIELDS))


def _stats(records: list[dict[str, Any]], metric: str) -> dict[str, float | int | None]:
    """``rows``: records with a finite ``<metric>_err``; median and p90 of |error| over
    the distinct runs among them (``runs``, :func:`run_key`), so that a run exported
    several times counts once."""
    rows = [r for r in records if r[f"{metric}_err"] is not None
            and np.isfinite(r[f"{metric}_err"])]
    runs = {run_key(r): abs(r[f"{metric}_err"]) for r in reversed(rows)}  # the first kept
    if not runs:
        return {"rows": 0, "runs": 0, "median": None, "p90": None}
    e = np.asarray(list(runs.values()), dtype=float)
    return {"rows": len(rows), "runs": int(e.size), "median": float(np.median(e)),
            "p90": float(np.percentile(e, 90))}


def evaluate(cases: list[Case], priors: dict[str, Priors]) -> list[dict[str, Any]]:
    """Every case simulated at ``priors`` (by framework): one record each."""
    out = []
    for c in cases:
        ttft, tpot, note = _predict(c, priors[c.framework])
        r = c.row
        out.append({"line": r.line, "id": r.id, "framework": c.framework,
                    "version": r.version, "model": c.model, "dtype": c.dtype, "gpu": c.gpu,
                    "tp": r.tp, "isl": r.isl, "osl": r.osl, "concurrency": r.concurrency,
                    "split": "test" if c.held_out else "fit",
                    "ttft_ms": r.ttft_ms, "ttft_pred_ms": ttft, "ttft_err": ttft / r.ttft_ms - 1,
                    "tpot_ms": r.tpot_ms, "tpot_pred_ms": tpot, "tpot_err": tpot / r.tpot_ms - 1,
                    "note": note, **({"ep": c.ep} if c.ep > 1 else {}),
                    **({"dp": c.dp} if c.dp > 1 else {}),
                    **({"kv_dtype": c.kv_dtype} if c.kv_dtype != "auto" else {}),
                    **({"expert_dtype": c.spec.expert_dtype} if c.spec.expert_dtype else {}),
                    **({"qkv_dtype": c.qkv_dtype} if c.qkv_dtype else {}),
                    **({"linear_layers": c.spec.linear_layers} if c.spec.linear_layers
                       else {})})
    return out


def weights(case: Case) -> str:
    """Which ``--weights`` selection ``case`` falls in: ``4bit`` (4-bit experts, or
    every projection at 4 bits), ``fp8`` or ``bf16``."""
    if case.spec.expert_dtype in FOUR_BIT_WEIGHTS or case.dtype in FOUR_BIT_WEIGHTS:
        return "4bit"
    return "fp8" if case.dtype != "bf16" else "bf16"


def group(record: dict[str, Any]) -> str:
    """The summary group of a record: its framework for bf16 weights, ``<framework> fp8``
    for FP8 ones (fp8 and fp8-block together), ``<framework> <dtype>`` for 4-bit experts
    or 4-bit projections, ``<framework> nvfp4 experts`` for NVFP4 experts beside
    16-bit projections (a dense model's NVFP4 rows quantise every projection); a model
    with Gated DeltaNet layers adds `` gdn`` (``sglang gdn``, ``sglang fp8 gdn``), so its
    rows stand apart from the softmax-attention models', and one whose checkpoint keeps
    its query/key/value projections at a dtype of their own adds that
    (``trtllm nvfp4 bf16-qkv``)."""
    if record.get("linear_layers"):
        base = group({k: v for k, v in record.items() if k != "linear_layers"})
        return f"{base} gdn"
    if record.get("qkv_dtype"):
        base = group({k: v for k, v in record.items() if k != "qkv_dtype"})
        return f"{base} {record['qkv_dtype']}-qkv"
    if record.get("expert_dtype") == "nvfp4":
        return f"{record['framework']} nvfp4 experts"
    if record.get("expert_dtype"):
        return f"{record['framework']} {record['expert_dtype']}"
    if record.get("dtype") in FOUR_BIT_WEIGHTS:
        return f"{record['framework']} {record['dtype']}"
    fp8 = record.get("dtype", "bf16") != "bf16"
    return f"{record['framework']} fp8" if fp8 else record["framework"]


def _kind(g: str) -> str:
    """What follows the framework in a group's name ("" for bf16 weights)."""
    return g.partition(" ")[2]


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median and p90 |relative error| by group (:func:`group`) and split, each measured
    run once (:func:`run_key`), over all bf16 rows (``all``), all FP8 rows (``all fp8``),
    all of each 4-bit expert dtype, and the rows served with expert parallelism
    (``expert parallel``) and those of them with data-parallel attention
    (``data-parallel attention``), also counted in their group)."""
    out: dict[str, Any] = {}
    groups = sorted({group(r) for r in records})
    wholes = ["all"] + [f"all {k}" for k in sorted({_kind(g) for g in groups} - {""})]
    wholes += ["expert parallel"] if any(r.get("ep", 1) > 1 for r in records) else []
    wholes += (["data-parallel attention"] if any(r.get("dp", 1) > 1 for r in records)
               else [])
    for g in groups + wholes:
        for split in ("fit", "test"):
            sel = [r for r in records if r["split"] == split and (
                group(r) == g or g.startswith("all") and _kind(group(r)) == _kind(g)
                or g == "expert parallel" and r.get("ep", 1) > 1
                or g == "data-parallel attention" and r.get("dp", 1) > 1)]
            out.setdefault(g, {})[split] = {m: _stats(sel, m) for m in ("ttft", "tpot")}
    return out
