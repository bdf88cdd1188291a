"""``servesim validate --silicon``: predicted against measured serving runs, and the
fit of the priors for what kernel tables do not measure.

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
import json
import math
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from scipy.optimize import least_squares

from sim.configtools import ArgParser, int_arg
from sim.cost.dtypes import FOUR_BIT_WEIGHTS
from sim.cost.frontend import Frontend
from sim.cost.overlap import HostOverlap
from sim.cost.priors import KEYS, LENGTHS, PRIORS_FILE, Priors, framework_priors
from sim.cost.profilecost import ProfileCost
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify, fits_context, tables_cover
from sim.validate.siliconrecipes import SCHEDULERS, predict
from sim.validate.siliconrows import Row, default_path, read_rows

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
    if case.row.collection == "inferencex" and case.framework in OVERLAPPED_HOST:
        return HostOverlap(cost)
    return cost


def _predict(case: Case, p: Priors) -> tuple[float, float, str]:
    """:func:`predict` of ``case`` at the priors ``p``; an error naming the row's file and
    line where the row cannot be simulated (a tp its model's heads do not split over)."""
    try:
        return predict(case, _cost(case, p))
    except ServesimError as exc:
        raise ServesimError(f"cannot simulate the row: {exc}", source=case.row.file or None,
                            where=f"line {case.row.line}") from None


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


def _stats(errs: list[float]) -> dict[str, float | int | None]:
    e = np.abs(np.asarray(errs, dtype=float))
    e = e[np.isfinite(e)]
    if not e.size:
        return {"rows": 0, "median": None, "p90": None}
    return {"rows": int(e.size), "median": float(np.median(e)), "p90": float(np.percentile(e, 90))}


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
    """Median and p90 |relative error| by group (:func:`group`) and split, over all bf16
    rows (``all``), all FP8 rows (``all fp8``), all of each 4-bit expert dtype, and the
    rows served with expert parallelism (``expert parallel``) and those of them with
    data-parallel attention (``data-parallel attention``), also counted in their
    group)."""
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
            out.setdefault(g, {})[split] = {m: _stats([r[f"{m}_err"] for r in sel])
                                            for m in ("ttft", "tpot")}
    return out


def _parser() -> ArgParser:
    """The options of ``servesim validate --silicon``."""
    p = ArgParser(prog="servesim validate --silicon",
                  description="Simulate public end-to-end serving runs and compare with their "
                              "measurements.")
    p.add_argument("--silicon", nargs="?", const="", default="", metavar="CSV",
                   help="silicon_sample.csv (default: the installed aiconfigurator-core's)")
    p.add_argument("--framework", action="append", default=None, choices=sorted(SCHEDULERS),
                   help="only these frameworks (repeatable)")
    p.add_argument("--fit-priors", type=Path, default=None, metavar="YAML",
                   help=f"fit the priors on the rows not held out and write them here "
                        f"(the shipped ones: {PRIORS_FILE.relative_to(PRIORS_FILE.parents[2])})")
    p.add_argument("--out", type=Path, default=Path("out/silicon"), help="output folder")
    p.add_argument("--limit", type=int_arg(ge=1), default=None, help="at most this many rows per "
                                                           "framework (quick looks)")
    p.add_argument("--weights", choices=("all", "bf16", "fp8", "4bit"), default="all",
                   help="only rows with bf16 or FP8 weights, or with 4-bit experts or "
                        "projections (default: all)")
    return p


def main(argv: list[str]) -> int:
    """Entry point of ``servesim validate --silicon``."""
    a = _parser().parse_args(argv)
    path = Path(a.silicon) if a.silicon else default_path()
    data = str(path) if a.silicon else DATA
    check_priors_path(a.fit_priors, path, a.out)
    rows = read_rows(path)
    cases, skipped = select(rows, a.framework, a.weights, path)
    if a.limit is not None:
        cases = [c for fw in sorted({c.framework for c in cases})
                 for c in [c for c in cases if c.framework == fw][:a.limit]]
    fws = sorted({c.framework for c in cases})
    if a.fit_priors is not None:
        check_fit_rows(cases, path, a.fit_priors)
        fitted = {fw: fit_framework([c for c in cases
                                     if c.framework == fw and not c.held_out], fw, data)
                  for fw in fws}
        priors = {fw: fitted[fw][0] for fw in fws}
        lengths = {fw: fitted[fw][2] for fw in fws}
    else:
        priors = {fw: framework_priors(fw) for fw in fws}
        lengths = {fw: priors[fw].aic_client_lengths for fw in fws}
    cases = [c2 for fw in fws for c2 in with_lengths([c for c in cases if c.framework == fw],
                                                      lengths[fw])]
    records = evaluate(cases, priors)
    stats = summary(records)
    from sim.report.folder import replaced_folder
    from sim.report.metrics import clean
    from sim.report.outputs import write_atomic
    from sim.validate.validation import VALIDATE_FILES

    with replaced_folder(a.out, VALIDATE_FILES, inputs=[path]) as stage:
        # A row none of whose requests finished has no mean: null, not NaN (not JSON).
        write_atomic(stage / "silicon.json", (json.dumps(clean(
            {"source": str(path), "rows": len(rows), "simulated": len(cases),
             "skipped": skipped, "priors": {fw: dataclasses.asdict(p)
                                            for fw, p in priors.items()},
             "aic_client_lengths": lengths,
             "errors": stats, "records": records}), indent=1, allow_nan=False) + "\n").encode())
        if a.fit_priors is not None:  # inside: a failed write leaves --out as it was
            write_priors(a.fit_priors, fitted, {fw: stats.get(fw, {}) for fw in fws}, data)
    _print(records, stats, skipped, len(rows), path)
    print(f"wrote {a.out / 'silicon.json'}" + (f" and {a.fit_priors}" if a.fit_priors else ""))
    return 0


def check_priors_path(target: Path | None, csv_path: Path, out: Path) -> None:
    """Refuse, before any work, a ``--fit-priors`` path that cannot take the priors: a
    folder, a file in a folder that does not exist (but ``out``, which the run makes), or
    the CSV the priors are fitted on."""
    if target is None:
        return
    where = f"--fit-priors {target}"
    if target.is_dir():
        raise ServesimError("is a folder; give the path of a YAML file to write the "
                            "fitted priors to", where=where)
    folder = target.parent
    if not folder.is_dir() and folder.resolve() != out.resolve():
        why = "is not a folder" if folder.exists() else "does not exist"
        raise ServesimError(f"its folder {folder} {why}; the priors are written to a file "
                            "in an existing folder", where=where)
    if target.exists() and csv_path.exists() and target.samefile(csv_path):
        raise ServesimError("is the input CSV; writing the priors there would overwrite the "
                            "measurements they are fitted on", where=where)


def select(rows: list[Row], frameworks: list[str] | None, weight: str,
           path: Path) -> tuple[list[Case], dict[str, int]]:
    """The cases of ``rows`` of the ``frameworks`` (None: all) and ``--weights`` selection
    ``weight`` that fit their model's context and the installed tables price, and how many
    rows each reason kept out. None is one error: naming the filters and what rows the
    file holds where they match none, the reasons otherwise."""
    modelled: list[Case] = []
    skipped: dict[str, int] = {}
    for r in rows:
        got = classify(r)
        if isinstance(got, str):
            skipped[got] = skipped.get(got, 0) + 1
        else:
            modelled.append(got)
    kept = [c for c in modelled if (frameworks is None or c.framework in frameworks)
            and weight in ("all", weights(c))]
    if modelled and not kept:
        raise ServesimError(f"no row matches {_filters(frameworks, weight)}; the rows "
                            f"servesim can simulate here are {_kinds(modelled)}",
                            source=str(path))
    cases = []
    for c in kept:
        got = fits_context(c)
        got = tables_cover(got) if isinstance(got, Case) else got
        if isinstance(got, str):
            skipped[got] = skipped.get(got, 0) + 1
        else:
            cases.append(got)
    if not cases:
        which = f" matching {_filters(frameworks, weight)}" if kept and (
            frameworks or weight != "all") else ""
        raise ServesimError(f"no row{which} can be simulated; skipped: " + "; ".join(
            f"{n} {why}" for why, n in sorted(skipped.items(), key=lambda x: -x[1])),
            source=str(path))
    return cases, skipped


def _filters(frameworks: list[str] | None, weight: str) -> str:
    """The filters given, as typed."""
    given = [f"--framework {f}" for f in frameworks or ()]
    return " ".join(given + ([f"--weights {weight}"] if weight != "all" else []))


def _kinds(cases: list[Case]) -> str:
    """How many of ``cases`` each framework has, by ``--weights`` selection."""
    count: dict[str, dict[str, int]] = {}
    for c in cases:
        by = count.setdefault(c.framework, {})
        by[weights(c)] = by.get(weights(c), 0) + 1
    return "; ".join(f"{fw} (" + ", ".join(f"{n} {w}" for w, n in sorted(by.items())) + ")"
                     for fw, by in sorted(count.items()))


def check_fit_rows(cases: list[Case], path: Path, target: Path) -> None:
    """Refuse a fit, before any simulation, where a framework of ``cases`` has no row
    to fit its priors on (all held out, :attr:`sim.validate.silicon.Case.held_out`)."""
    fws = sorted({c.framework for c in cases})
    bare = {fw: sum(c.framework == fw for c in cases) for fw in fws
            if all(c.held_out for c in cases if c.framework == fw)}
    if bare:
        what = " and ".join(f"{fw} ({n} row{'s' * (n != 1)})" for fw, n in bare.items())
        raise ServesimError(
            f"nothing to fit the priors of {what} on: all {'its' if len(bare) == 1 else 'their'} "
            "rows are held out (mixtures of experts, FP8 weights outside InferenceX's dense "
            "rows, InferenceX rows on B200 and B300, and the hash's test half of the rest); "
            f"leave {'it' if len(bare) == 1 else 'them'} out with --framework, or give rows "
            "to fit",
            source=str(path), where=f"--fit-priors {target}")


def _print(records: list[dict[str, Any]], stats: dict[str, Any], skipped: dict[str, int],
           total: int, path: Path) -> None:
    head = (f"{'line':>5} {'framework':<8} {'model':<23} {'gpu':<9} {'tp':>2} {'isl':>5} "
            f"{'osl':>5} {'conc':>4} {'set':<4} {'TTFT ms':>9} {'pred':>9} {'err':>7} "
            f"{'TPOT ms':>8} {'pred':>8} {'err':>7}")
    print(head)
    for r in records:
        model = r["model"] + ("" if r.get("dtype", "bf16") == "bf16" else f" {r['dtype']}") \
            + (" nvfp4-exp" if r.get("expert_dtype") == "nvfp4" else "")
        print(f"{r['line']:>5} {r['framework']:<8} {model:<23} {r['gpu']:<9} {r['tp']:>2} "
              f"{r['isl']:>5} {r['osl']:>5} {r['concurrency']:>4} {r['split']:<4} "
              f"{r['ttft_ms']:>9.1f} {r['ttft_pred_ms']:>9.1f} {r['ttft_err']:>+7.1%} "
              f"{r['tpot_ms']:>8.2f} {r['tpot_pred_ms']:>8.2f} {r['tpot_err']:>+7.1%}"
              + (f"  ({r['note']})" if r["note"] else ""))
    print(f"{len(records)} of {total} rows of {path} simulated; skipped: "
          + "; ".join(f"{n} {why}" for why, n in sorted(skipped.items(), key=lambda x: -x[1])))
    for fw, by in stats.items():
        for split, m in by.items():
            if m["ttft"]["rows"]:
                print(f"{fw:<7} {split:<4} rows {m['ttft']['rows']:>3}: median |err| TTFT "
                      f"{_pct(m['ttft']['median'])}, TPOT {_pct(m['tpot']['median'])}; p90 "
                      f"TTFT {_pct(m['ttft']['p90'])}, TPOT {_pct(m['tpot']['p90'])}")


def _pct(x: float | None) -> str:
    return "-" if x is None or not math.isfinite(x) else f"{x:.1%}"


__all__ = ["Row", "main"]
