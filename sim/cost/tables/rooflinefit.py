"""The roofline's efficiency factors and kernel floor, fitted on public kernel tables.

``cost: roofline`` prices a step from datasheet FLOP/s and bandwidth times efficiency
factors (:class:`sim.cost.roofline.RooflineParams`). Its defaults come from here: the same
components measured in NVIDIA AIConfigurator's tables (:mod:`sim.cost.tables.profilebuild`'s
sources) for a few models and tensor-parallel degrees on every GPU the tables cover —

- the projections of every layer at 1 ... 4,096 tokens (the GEMM tables),
- the LM head at 1 ... 256 sequences,
- prefill attention of one sequence of 16 ... 4,096 tokens, and decode attention of
  1 ... 128 sequences at 128 ... 4,096 cached tokens (the attention tables) —

are fitted by the roofline's own formulas (:meth:`sim.cost.roofline.RooflineCost.parts`)
minimising squared log-ratios. ``servesim profile fit-roofline`` fits on all GPUs but
one and reports the error on the one left out, for each GPU in turn (how well the
roofline predicts a GPU nobody measured), then fits on all of them: those are the
defaults. It also reports that fit's error on the GPUs kept out of every fit
(:data:`sim.cost.tables.kerneltables.HELD_OUT_DIRS`). Errors are given for each
component and for whole steps' kernel time.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.optimize import least_squares

from sim.cliargs import ArgParser
from sim.cost.gpus import GPUS
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.cost.shard import shard
from sim.cost.tables.attntables import decode_grid, select
from sim.cost.tables.gemmtable import gemm_table, projection_gemms
from sim.cost.tables.kerneltables import GPU_DIRS, HELD_OUT_DIRS, coverage
from sim.cost.tables.layergemms import layer_gemms
from sim.cost.tables.moetable import moe_times
from sim.cost.tables.profileparts import attention_table
from sim.errors import ServesimError

# (model, tp) whose kernels are compared, when the model's heads split over tp.
SHAPES = (("llama-3-8b", 1), ("qwen3-32b", 2), ("llama-3-70b", 4))
TOKENS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024, 2048, 4096)
SEQS = (1, 2, 4, 8, 16, 32, 64, 128, 256)
PREFILL = (16, 64, 256, 1024, 2048, 4096)
DECODE = tuple((b, c) for b in (1, 8, 32, 128) for c in (128, 1024, 4096))
FITTED = ("flops_efficiency", "bandwidth_efficiency", "attention_flops_efficiency",
          "kernel_floor_s", "attention_floor_s")


@dataclass(frozen=True)
class Points:
    """Measured seconds of roofline components on one GPU: ``component`` names the
    roofline part each point is compared with, ``shape`` its step, ``model``/``tp``."""

    gpu: str
    component: list[str]
    shapes: list[StepShape]
    models: list[tuple[str, int]]
    seconds: np.ndarray
    dtype: str = "bf16"  # the models' weight dtype

    @property
    def fitted(self) -> np.ndarray:
        """Which points the fit uses: the components (whole steps are only reported)."""
        return np.array([c != "step" for c in self.component])


def fp8_points(gpu: str, framework: str = "vllm") -> Points:
    """The FP8 (per-tensor) GEMM tables' projection times of every :data:`SHAPES` model
    on ``gpu`` at :data:`TOKENS`, component ``linear``; the points' models are FP8."""
    version = coverage()[gpu][framework][-1]
    gemm = gemm_table(gpu, framework, version, "fp8").table
    shapes, models, secs = [], [], []
    for name, tp in SHAPES:
        d = shard(MODELS[name], tp)
        for n in TOKENS:
            shapes.append(shape_of([(n, 0)]))
            models.append((name, tp))
            secs.append(MODELS[name].layers * sum(gemm.at(n, nn, kk)
                                                  for nn, kk in layer_gemms(d)))
    return Points(gpu, ["linear"] * len(secs), shapes, models, np.asarray(secs), "fp8")


# (MoE model, tp) whose layers are compared, where the MoE tables measured them.
MOE_SHAPES = (("mixtral-8x7b", 2), ("qwen3-30b-a3b", 1), ("qwen3-235b-a22b", 8))


def moe_points(gpu: str, framework: str = "vllm") -> Points:
    """Every :data:`MOE_SHAPES` model's projections on ``gpu`` at :data:`TOKENS`
    (component ``linear``): its attention GEMMs from the bf16 GEMM table and its MoE
    layer from the MoE table (:mod:`sim.cost.tables.moetable`), all layers."""
    version = coverage()[gpu][framework][-1]
    gemm = projection_gemms(gpu, framework, version, "bf16")[0].table  # as profiles price
    shapes, models, secs = [], [], []
    for name, tp in MOE_SHAPES:
        m = MODELS[name]
        try:
            moe = moe_times(gpu, framework, version, m, tp, routing="balanced")
        except ServesimError:
            continue  # not measured on this GPU
        d = shard(m, tp)
        for n in TOKENS:
            attn = sum(gemm.at(n, nn, kk) for nn, kk in layer_gemms(d)[:2])
            shapes.append(shape_of([(n, 0)]))
            models.append((name, tp))
            secs.append(m.layers * (attn + float(moe.at(np.array([n]))[0])))
    return Points(gpu, ["linear"] * len(secs), shapes, models, np.asarray(secs))


def fit_moe(points: list[Points], start: RooflineParams) -> RooflineParams:
    """``moe_flops_efficiency`` fitted on MoE ``points`` at 512 tokens and more (where
    the experts' FLOPs, not their bytes, set the time), the other fields as in
    ``start``."""

    def residual(z: np.ndarray) -> np.ndarray:
        p = dataclasses.replace(start, moe_flops_efficiency=float(z[0]))
        return np.concatenate([np.log(predicted(pt, p) / pt.seconds)[_big(pt)]
                               for pt in points])

    res = least_squares(residual, [start.moe_flops_efficiency], bounds=([0.05], [1.0]))
    return dataclasses.replace(start, moe_flops_efficiency=float(res.x[0]))


def _big(points: Points) -> np.ndarray:
    """Which points have 512 new tokens or more (FLOP-bound projections)."""
    return np.array([s.new_tokens >= 512 for s in points.shapes])


def measured_points(gpu: str, framework: str = "vllm") -> Points:
    """The tables' kernel times of every :data:`SHAPES` model on ``gpu``."""
    version = coverage()[gpu][framework][-1]
    gemm = projection_gemms(gpu, framework, version, "bf16")[0].table  # as profiles price
    comp: list[str] = []
    shapes: list[StepShape] = []
    models: list[tuple[str, int]] = []
    secs: list[float] = []
    for name, tp in SHAPES:
        m = MODELS[name]
        d = shard(m, tp)
        gemms = layer_gemms(d)
        sizes = sorted({*TOKENS, *SEQS, *PREFILL, *(b for b, _ in DECODE)})
        linear = {n: m.layers * sum(gemm.at(n, nn, kk) for nn, kk in gemms) for n in sizes}
        head = {q: gemm.at(q, d.vocab, d.hidden) for q in sizes}
        for n in TOKENS:
            comp.append("linear")
            shapes.append(shape_of([(n, 0)]))
            secs.append(linear[n])
        for q in SEQS:
            comp.append("lm_head")
            shapes.append(decode_shape(q, 0))
            secs.append(head[q])

        pre = select(attention_table(gpu, framework, version, "context_attention_perf"),
                     d.heads, d.kv_heads, d.head_dim, "bfloat16", decode=False)
        for n in PREFILL:
            hit = (pre.batch == 1) & (pre.tokens == n)
            if hit.any():
                attn = m.layers * float(pre.seconds[hit][0])
                shape = shape_of([(n, 0)])
                comp += ["attention", "step"]
                shapes += [shape, shape]
                secs += [attn, linear[n] + attn + head[1]]
        grid = decode_grid(select(attention_table(gpu, framework, version,
                                                  "generation_attention_perf"),
                                  d.heads, d.kv_heads, d.head_dim, "bfloat16", decode=True))
        for b, c in DECODE:
            attn = m.layers * grid.at(b, c + 1)
            shape = decode_shape(b, b * c)
            comp += ["attention", "step"]
            shapes += [shape, shape]
            secs += [attn, linear[b] + attn + head[b]]
        models += [(name, tp)] * (len(comp) - len(models))
    return Points(gpu, comp, shapes, models, np.asarray(secs))


def predicted(points: Points, params: RooflineParams) -> np.ndarray:
    """The roofline's seconds for each point's component."""
    out = np.empty(len(points.shapes))
    costs: dict[tuple[str, int], RooflineCost] = {}
    for i, (c, s, mt) in enumerate(zip(points.component, points.shapes, points.models,
                                       strict=True)):
        if mt not in costs:
            model = dataclasses.replace(MODELS[mt[0]], dtype=points.dtype)  # type: ignore[arg-type]
            costs[mt] = RooflineCost(model, GPUS[points.gpu], mt[1], params)
        parts = costs[mt].parts(s)
        # A step's kernel time: its projections, attention and LM head (no all-reduce,
        # no host overhead: the tables time kernels alone).
        out[i] = (parts["linear"] + parts["attention"] + parts["lm_head"] if c == "step"
                  else parts[c])
    return out


def fit(points: list[Points], start: RooflineParams) -> RooflineParams:
    """The :data:`FITTED` factors, starting from ``start``'s, minimising squared
    log-ratios over ``points``; the other fields as in ``start``."""
    x0 = np.array([getattr(start, k) for k in FITTED])
    scale = np.array([1.0, 1.0, 1.0, 1e-6, 1e-6])

    def residual(z: np.ndarray) -> np.ndarray:
        values: dict[str, Any] = dict(zip(FITTED, (float(v) for v in z * scale), strict=True))
        p = dataclasses.replace(start, **values)
        return np.concatenate([np.log(predicted(pt, p) / pt.seconds)[pt.fitted]
                               for pt in points])

    res = least_squares(residual, x0 / scale, bounds=([0.05, 0.05, 0.05, 0.0, 0.0],
                                                      [1.0, 1.0, 1.0, 50.0, 50.0]))
    best: dict[str, Any] = dict(zip(FITTED, (float(v) for v in res.x * scale), strict=True))
    return dataclasses.replace(start, **best)


def fit_fp8(points: list[Points], start: RooflineParams) -> RooflineParams:
    """``fp8_flops_efficiency`` fitted on FP8 projection ``points`` (squared log-ratios),
    every other field as in ``start`` (the bf16 fit's bandwidth and floors apply)."""

    def residual(z: np.ndarray) -> np.ndarray:
        p = dataclasses.replace(start, fp8_flops_efficiency=float(z[0]))
        return np.concatenate([np.log(predicted(pt, p) / pt.seconds) for pt in points])

    res = least_squares(residual, [start.fp8_flops_efficiency], bounds=([0.05], [1.0]))
    return dataclasses.replace(start, fp8_flops_efficiency=float(res.x[0]))


def projection_errors(points: Points, params: RooflineParams) -> dict[str, float]:
    """Median and p90 |relative error| of ``points``' projection times (FP8 or MoE), and
    the median at 512 tokens and more."""
    rel = np.abs(predicted(points, params) / points.seconds - 1.0)
    big = _big(points)
    return {"median": float(np.median(rel)), "p90": float(np.percentile(rel, 90)),
            "median_512_up": float(np.median(rel[big])), "points": int(rel.size)}


def errors(points: Points, params: RooflineParams) -> dict[str, dict[str, float]]:
    """Median and p90 |relative error| per component and over whole steps' kernel time
    (a prefill of n tokens: projections, attention, LM head; a decode of b sequences)."""
    pred = predicted(points, params)
    rel = np.abs(pred / points.seconds - 1.0)
    out = {}
    for comp in ("linear", "attention", "lm_head", "step"):
        sel = np.array([c == comp for c in points.component])
        out[comp] = {"median": float(np.median(rel[sel])),
                     "p90": float(np.percentile(rel[sel], 90)), "points": int(sel.sum())}
    return out


def main(argv: list[str]) -> int:
    """``servesim profile fit-roofline``: leave-one-GPU-out errors, then the fit on all."""
    p = ArgParser(prog="servesim profile fit-roofline",
                                description="Fit the roofline's efficiencies and kernel floor "
                                            "on the public kernel tables.")
    p.parse_args(argv)
    gpus = list(GPU_DIRS)
    pts = {g: measured_points(g) for g in gpus}
    base = RooflineParams()
    print(f"{'left out':<10} {'fitted on the others':<54} {'linear':>13} {'attention':>13} "
          f"{'lm_head':>13} {'whole step':>13}   (median / p90 |error| on the left-out GPU)")
    for g in gpus:
        p_ = fit([pts[o] for o in gpus if o != g], base)
        e = errors(pts[g], p_)
        print(f"{g:<10} {_describe(p_):<54} " + " ".join(
            f"{e[c]['median']:>6.1%}/{e[c]['p90']:<6.1%}" for c in ("linear", "attention",
                                                                    "lm_head", "step")))
    final = fit([pts[g] for g in gpus], base)
    print(f"fitted on all: {_describe(final)}")
    for g in HELD_OUT_DIRS:
        # A GPU no fit saw: the roofline of all the others, as it ships.
        e = errors(measured_points(g), final)
        print(f"{g:<10} {'never fitted: the fit on all above':<54} " + " ".join(
            f"{e[c]['median']:>6.1%}/{e[c]['p90']:<6.1%}" for c in ("linear", "attention",
                                                                    "lm_head", "step")))
    # FP8 projections: their efficiency alone, the bf16 fit's other factors held.
    fp8_gpus = [g for g in gpus if GPUS[g].fp8_flops]
    f8 = {g: fp8_points(g) for g in fp8_gpus}
    print(f"{'left out':<10} {'FP8 efficiency fitted on the others':<36} "
          f"{'FP8 projections: median / p90 |error| (median at >= 512 tokens)':>20}")
    for g in fp8_gpus:
        p8 = fit_fp8([f8[o] for o in fp8_gpus if o != g], final)
        e8 = projection_errors(f8[g], p8)
        print(f"{g:<10} e_f8 {p8.fp8_flops_efficiency:<31.3f} {e8['median']:.1%} / "
              f"{e8['p90']:.1%} ({e8['median_512_up']:.1%})")
    p8 = fit_fp8([f8[g] for g in fp8_gpus], final)
    print(f"FP8 fitted on all: e_f8 {p8.fp8_flops_efficiency:.3f}")
    # MoE layers: the grouped expert GEMMs' efficiency alone, the rest held.
    mo = {g: pt for g in gpus if len((pt := moe_points(g)).shapes)}
    print(f"{'left out':<10} {'MoE efficiency fitted on the others':<36} "
          "MoE models' projections: median / p90 |error| (median at >= 512 tokens)")
    for g in mo:
        pm = fit_moe([mo[o] for o in mo if o != g], final)
        em = projection_errors(mo[g], pm)
        print(f"{g:<10} e_moe {pm.moe_flops_efficiency:<30.3f} {em['median']:.1%} / "
              f"{em['p90']:.1%} ({em['median_512_up']:.1%})")
    pm = fit_moe(list(mo.values()), final)
    print(f"MoE fitted on all: e_moe {pm.moe_flops_efficiency:.3f}")
    return 0


def _describe(p: RooflineParams) -> str:
    return (f"e_f {p.flops_efficiency:.3f} e_b {p.bandwidth_efficiency:.3f} "
            f"e_a {p.attention_flops_efficiency:.3f} floors {p.kernel_floor_s * 1e6:.2f} / "
            f"{p.attention_floor_s * 1e6:.2f} us")


