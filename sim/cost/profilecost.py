"""A measured profile as a cost model: the sum of its components, priced fast.

:class:`ProfileCost` prices a step as the sum of the :data:`sim.cost.profile.FORMS`
components: each by its formula, by measured knots inside their range
(:class:`sim.cost.curves.Knots`), or by a measured grid (:class:`sim.cost.curves.Grid`, decode
attention), per-layer terms times the layer count. The simulator prices one step at a
time, so a scalar shape takes a path of Python floats that skips components which
are zero for it (exactly zero: the sum is unchanged); arrays take numpy. Both use the
same formulas and give the same seconds to rounding.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from operator import attrgetter
from typing import Any

import numpy as np

from sim.cost.curves import Grid, Knots
from sim.cost.frontend import NO_FRONTEND, Frontend
from sim.cost.gpus import GPUS
from sim.cost.profile import ARRAY, FORMS, SCALAR, ComponentForm, wake_curve
from sim.cost.shape import StepShape
from sim.cost.shard import shard
from sim.cost.specs import ModelSpec
from sim.errors import ServesimError


def _total(parts: Any) -> Any:
    """Sum of component seconds: a float for a scalar shape, an array for arrays."""
    t = sum(parts)
    return float(t) if np.ndim(t) == 0 else t


# Light prices kept at most (one per distinct step of entries / new tokens / prefills).
KEPT_MAX = 1 << 17
LIGHT_READS = frozenset(("seqs", "new_tokens", "prefill_seqs"))
# Components a pipeline's stages share evenly: per-step work of each stage's worker.
SHARED_PARTS = frozenset(("step", "host"))


def _light(name: str, form: ComponentForm, grids: Mapping[str, Grid]) -> bool:
    """Whether a component's price depends only on the counts in :data:`LIGHT_READS`."""
    return name not in grids and bool(form.reads) and set(form.reads) <= LIGHT_READS


def knot_edges(knots: Mapping[str, Knots],
               coefs: Mapping[str, Mapping[str, float]]) -> dict[str, float]:
    """Per knotted component whose formula reads its knots' count alone (the linear
    layers', the LM head's, the all-reduce's), the formula's seconds at its last knot:
    past it a price is the formula's scaled to meet that knot
    (:meth:`sim.cost.curves.Knots.outside`). A formula that reads more (a prefill's
    context) has no single value there and prices past its knots unscaled."""
    out: dict[str, float] = {}
    for name, k in knots.items():
        form = FORMS[name]
        if form.reads == (form.table,):
            shape = StepShape(*(k.xs[-1] if f == form.table else 0 for f in StepShape._fields))
            out[name] = float(form.evaluate(coefs[name], shape, SCALAR))
    return out


def kv_read_floor(model: ModelSpec, tp: int, device: str) -> float:
    """Seconds per cached token below which a step's decode attention cannot read its KV:
    the rank's KV bytes per token over every attention layer, over the peak memory
    bandwidth of ``device`` (:data:`sim.cost.gpus.GPUS`). The tables time one layer, whose
    KV may sit in L2 (96 MB on an L40S), where a step's layers each read their own from
    DRAM. 0 (no floor) on a device not in the GPU table (a CPU calibration), or where a
    layer reads fewer than every cached token (sliding windows, sparse attention)."""
    gpu = GPUS.get(device)
    if gpu is None or model.sliding_layers or model.index_topk:
        return 0.0
    bw = gpu.mem_bw
    try:
        per_token = shard(model, tp).kv_bytes_per_token
    except ServesimError:
        return 0.0
    return per_token / float(bw)


def _zero(form: ComponentForm, coef: Mapping[str, float]) -> bool:
    """Whether a formula is zero for every shape (all its seconds coefficients are 0)."""
    return all(coef[k] == 0.0 for k in form.coefs if k not in form.knees)


class ProfileCost:
    """Step time from a measured profile: sum of the :data:`sim.cost.profile.FORMS` components.

    ``coefs`` maps each component name to its coefficient mapping (seconds); ``knots``
    maps a component with a ``table`` count to its measured :class:`Knots` (seconds at
    those counts, per layer for per-layer components; a plain sequence means counts 1,
    2, ...); ``grids`` maps a component with ``grid`` to its :class:`Grid`, which then
    prices it alone. ``wake`` holds ``max_s`` and ``tau_s`` of :meth:`wake_time` (none:
    a step after idle costs what it costs after others). ``frontend`` is the API
    server's per-request latency (none: zero). ``step_time`` is pure and accepts numpy
    arrays in any shape field. ``experts``: in a profile of one data-parallel attention
    rank (``meta["dp"]`` > 1), the routed experts' seconds at counts of the whole group's
    new tokens, which the components then leave out (:meth:`experts_time`).
    ``kv_floor``: seconds per cached token of the decode entries below which decode
    attention is never priced (:func:`kv_read_floor`; 0: none).
    """

    def __init__(self, model: ModelSpec, tp: int, device: str, dtype: str,
                 coefs: Mapping[str, Mapping[str, float]], meta: dict[str, Any] | None = None,
                 knots: Mapping[str, Knots | tuple[float, ...]] | None = None,
                 wake: Mapping[str, float] | None = None, frontend: Frontend = NO_FRONTEND,
                 grids: Mapping[str, Grid] | None = None, experts: Knots | None = None):
        self.model, self.tp, self.device, self.dtype = model, tp, device, dtype
        self.coefs = {k: dict(v) for k, v in coefs.items()}
        for name, form in FORMS.items():
            # A component every coefficient of which has a default (one newer than the
            # caller, e.g. sparse_prefill to a calibration) is that default: zero.
            if name not in self.coefs and set(form.defaults) == set(form.coefs):
                self.coefs[name] = dict(form.defaults)
        self.knots = {k: v if isinstance(v, Knots) else Knots.counts(v)
                      for k, v in (knots or {}).items() if (v.xs if isinstance(v, Knots) else v)}
        self.grids = dict(grids or {})
        self._edges = knot_edges(self.knots, self.coefs)
        self.kv_floor = kv_read_floor(model, tp, device)
        self.wake = {k: float(v) for k, v in (wake or {}).items()}
        self.frontend = frontend
        self.meta: dict[str, Any] = meta or {}
        self.experts = experts
        used = [(name, form) for name, form in FORMS.items()
                if name in self.knots or name in self.grids or not _zero(form, self.coefs[name])]
        # Components that read only a step's entries, new tokens and prefill entries are
        # priced together and kept per those three counts; the rest every step.
        self._light = [self._scalar_part(n, f) for n, f in used if _light(n, f, self.grids)]
        self._heavy = [self._scalar_part(n, f) for n, f in used
                       if not _light(n, f, self.grids)]
        # Arrays are summed in the same grouping and order (zeros add nothing), so one
        # step priced alone and in an array give the same float.
        self._light_names = [n for n, f in FORMS.items() if _light(n, f, self.grids)]
        self._heavy_names = [n for n in FORMS if n not in self._light_names]
        self._kept: dict[tuple[int, int, int], float] = {}
        self._stage_parts: list[list[Callable[[StepShape], float]]] | None = None
        self._run_parts: list[Callable[[int, int, int], float] | bool | None] | None = None

    @property
    def source(self) -> str:
        """Where the prices come from, in one phrase: the profile's own (``source.phrase``,
        e.g. "measured kernels: vLLM 0.24.0 on H100-SXM"), else its calibration device."""
        src = self.meta.get("source")
        if isinstance(src, dict) and isinstance(src.get("phrase"), str):
            return src["phrase"]
        return f"calibrated profile: {self.device} ({self.dtype})"

    @property
    def tables(self) -> dict[str, tuple[float, ...]]:
        """Measured times at counts 1, 2, ... of the components whose knots are exactly
        those counts (what ``calibrate`` measures)."""
        return {k: v.ys for k, v in self.knots.items()
                if v.xs == tuple(float(i) for i in range(1, len(v.xs) + 1))}

    def _scalar_part(self, name: str, form: ComponentForm) -> Callable[[StepShape], float]:
        """One component's seconds for a scalar shape (layers included)."""
        layers = self.model.layers if form.per_layer else 1
        coef, evaluate = self.coefs[name], form.evaluate
        grid = self.grids.get(name)
        if grid is not None:
            floor = self.kv_floor

            def from_grid(s: StepShape) -> float:
                d = s.seqs - s.prefill_seqs
                if d <= 0:
                    return 0.0
                t = grid.at(d, s.decode_kv / d) * layers
                f = s.decode_kv * floor
                return f if f > t else t
            return from_grid
        knots = self.knots.get(name)
        if knots is not None:
            count, edge = form.table, self._edges.get(name)

            def from_knots(s: StepShape) -> float:
                x = getattr(s, count)
                t = knots.at(x)
                if t is None:
                    t = knots.outside(x, evaluate(coef, s, SCALAR), edge)
                return t * layers
            return from_knots
        if form.gate:
            # Every term is zero without the gate's count: skipping it is exact.
            gate = attrgetter(form.gate)
            return lambda s: evaluate(coef, s, SCALAR) * layers if gate(s) else 0.0
        return lambda s: evaluate(coef, s, SCALAR) * layers

    def _part(self, name: str, form: ComponentForm, shape: StepShape) -> Any:
        """One component's seconds for a shape of numpy arrays (layers included)."""
        grid = self.grids.get(name)
        if grid is not None:
            d = np.asarray(shape.decode_seqs, dtype=float)
            with np.errstate(invalid="ignore", divide="ignore"):
                t = np.where(d > 0, grid.over(np.maximum(d, 1.0),
                                              np.asarray(shape.decode_kv) / np.maximum(d, 1.0)),
                             0.0)
            if form.per_layer:
                floor = np.where(d > 0, np.asarray(shape.decode_kv) * self.kv_floor, 0.0)
                return np.maximum(t * self.model.layers, floor)
        else:
            t = form.evaluate(self.coefs[name], shape, ARRAY)
            if name in self.knots:
                t = self.knots[name].over_edges(getattr(shape, form.table), t,
                                                self._edges.get(name))
        return t * self.model.layers if form.per_layer else t

    def breakdown(self, shape: StepShape) -> dict[str, Any]:
        """Seconds per component for ``shape`` (per-layer terms already times layers)."""
        if np.ndim(shape.seqs) == 0:
            # One step, through the array path: every component, zeros included.
            arrays = StepShape(*(np.asarray([v]) for v in shape))
            return {k: float(v[0]) for k, v in self.breakdown(arrays).items()}
        return {name: self._part(name, form, shape) for name, form in FORMS.items()}

    def step_time(self, shape: StepShape) -> Any:
        """Seconds one iteration of ``shape`` takes (float for scalars, array for arrays):
        the device step and the serving loop's host work around it."""
        if type(shape.seqs) is int:
            t = self._light_time(shape)
            for part in self._heavy:
                t += part(shape)
            return t
        return self._grouped(self.breakdown(shape), ())

    def step_time_plus(self, shape: StepShape, extra_s: float) -> float:
        """Seconds of one iteration of ``shape`` (Python ints) whose device work runs
        ``extra_s`` seconds longer: a data-parallel rank's step with the shared experts."""
        return float(self.step_time(shape)) + extra_s

    def experts_time(self, tokens: int) -> float:
        """Seconds of a data-parallel group's routed experts (every MoE layer, dispatch
        and combine) for ``tokens`` new tokens of all its ranks: the measured knots,
        joined linearly, held at the first below them and in proportion past the last."""
        knots = self.experts
        if knots is None:
            raise ValueError("this profile prices no shared experts (dp = 1)")
        t = knots.at(tokens)
        if t is not None:
            return t
        if tokens < knots.xs[0]:
            return knots.ys[0]
        return knots.ys[-1] * tokens / knots.xs[-1]

    def _light_time(self, shape: StepShape) -> float:
        """The light parts of a scalar step (those reading only its entries, new tokens
        and prefill entries), kept per those three counts."""
        key = (shape.seqs, shape.new_tokens, shape.prefill_seqs)
        t = self._kept.get(key)
        if t is None:
            t = 0.0
            for part in self._light:
                t += part(shape)
            if len(self._kept) >= KEPT_MAX:
                self._kept.clear()  # recomputed alike: only memory is saved
            self._kept[key] = t
        return t

    def head(self, layers: int) -> ProfileCost:
        """The same shard cut to ``layers`` decoder layers with its LM head, as a
        speculative head drafts (an EAGLE head, DeepSeek-V3's MTP block): the per-layer
        components at ``layers`` layers, the all-reduces (priced for the whole model) in
        proportion, the LM head whole, and no per-step host work (``step``, ``host``):
        the target's engine step pays that once. Each layer is the profile's mean layer,
        so a model with Gated DeltaNet layers, whose mean layer is no head's (its MTP
        layers are full attention), is refused: its head is priced by the roofline
        (:func:`sim.core.cluster.speculation`)."""
        if self.model.linear_layers:
            raise ValueError(f"{self.model.name}'s profile layer averages Gated DeltaNet and "
                             "attention layers: no head's layer")
        share = layers / self.model.layers
        coefs = {k: dict(v) for k, v in self.coefs.items()}
        for name in SHARED_PARTS:
            coefs[name] = dict.fromkeys(coefs[name], 0.0)
        coefs["allreduce"] = {k: v * share for k, v in coefs["allreduce"].items()}
        knots = {k: Knots(v.xs, tuple(y * share for y in v.ys)) if k == "allreduce" else v
                 for k, v in self.knots.items() if k not in SHARED_PARTS}
        # A head attends to the whole context, whatever window the target's layers keep
        # (sim.config.speculative.drafter_model).
        head = dataclasses.replace(self.model, layers=layers, dense_layers=0, sliding_layers=0,
                                   sliding_window=0)
        return ProfileCost(head, self.tp,
                           self.device, self.dtype, coefs, self.meta, knots,
                           grids={k: v for k, v in self.grids.items() if k not in SHARED_PARTS})

    def decode_run(self, seqs: int, context: int, k: int) -> float:
        """Seconds of ``k`` decode steps of ``seqs`` entries, step i's entries holding
        ``context + i·seqs`` tokens between them (a head's draft steps): the parts that
        do not read the context once times k, a measured decode grid summed by
        :meth:`sim.cost.curves.Grid.run_at`, any other part step by step."""
        if self._run_parts is None:
            # Per heavy part: a grid's run, False for a part a step without prefill
            # entries skips (its gate is zero), None to price step by step.
            self._run_parts = [
                self._grid_run(name, form) if name in self.grids
                else False if form.gate == "prefill_seqs" else None
                for name, form in FORMS.items()
                if name in self.knots or name in self.grids or not _zero(form, self.coefs[name])
                if not _light(name, form, self.grids)]
        first = tuple.__new__(StepShape, (seqs, seqs, context, 0, 0, 0, context + seqs))
        t = k * self._light_time(first)
        for run, part in zip(self._run_parts, self._heavy, strict=True):
            if isinstance(run, bool):  # a part zero without prefill entries
                continue
            if run is not None:
                t += run(seqs, context, k)
                continue
            for i in range(k):
                c = context + i * seqs
                t += part(tuple.__new__(StepShape, (seqs, seqs, c, 0, 0, 0, c + seqs)))
        return t

    def _grid_run(self, name: str, form: ComponentForm) -> Callable[[int, int, int], float]:
        """A grid component over a run of decode steps (see :meth:`decode_run`)."""
        grid, layers = self.grids[name], self.model.layers if form.per_layer else 1
        floor = self.kv_floor
        if not floor:
            # Step i's entries hold context/seqs + 1 + i tokens each: one column unit apart.
            return lambda seqs, context, k: grid.run_at(seqs, context / seqs + 1, k) * layers

        def run(seqs: int, context: int, k: int) -> float:
            # Step i's entries hold context/seqs + 1 + i tokens each: one column unit apart.
            first, last = context + seqs, context + k * seqs
            if (first * floor <= grid.at(seqs, first / seqs) * layers
                    and last * floor <= grid.at(seqs, last / seqs) * layers):
                return grid.run_at(seqs, context / seqs + 1, k) * layers
            # The KV-read floor binds somewhere in the run: step by step.
            total = 0.0
            for i in range(k):
                kv = first + i * seqs
                t, f = grid.at(seqs, kv / seqs) * layers, kv * floor
                total += f if f > t else t
            return total
        return run

    def stage_split(self, shape: StepShape) -> tuple[float, float, float]:
        """Seconds of one step of ``shape`` (Python ints) as a pipeline divides them
        (:class:`sim.cost.pipeline.StageCost`): the per-layer components and the
        all-reduces (layer work), the LM head (the last stage's), and the step and host
        terms (per-step work every stage's worker shares)."""
        if self._stage_parts is None:
            groups: list[list[Callable[[StepShape], float]]] = [[], [], []]
            for name, form in FORMS.items():
                if name in self.knots or name in self.grids or not _zero(form, self.coefs[name]):
                    g = 1 if name == "lm_head" else 2 if name in SHARED_PARTS else 0
                    groups[g].append(self._scalar_part(name, form))
            self._stage_parts = groups
        layer, last, shared = ([sum(part(shape) for part in g) for g in self._stage_parts])
        return float(layer), float(last), float(shared)

    def host_terms(self) -> tuple[float, float, float, float]:
        """The serving loop's host work within a step (what async scheduling overlaps,
        :mod:`sim.cost.overlap`) as (fixed s, s per sequence, s per decode group, group
        count cap): the timed ``host`` term, and in a profile built from kernel tables the
        step's priors (its fixed, per-sequence and per-group seconds; the embedding read
        is device work)."""
        h = self.coefs.get("host", {})
        const, per_seq = h.get("const_s", 0.0), h.get("per_seq_s", 0.0)
        per_group, groups = 0.0, 0.0
        src = self.meta.get("source")
        if isinstance(src, dict) and src.get("kind") == "measured-kernels":
            c = self.coefs["step"]
            const, per_seq = const + c["const_s"], per_seq + c["per_seq_s"]
            per_group, groups = c["per_group_s"], c["group_seqs"]
        return const, per_seq, per_group, groups

    def device_time(self, shape: StepShape) -> Any:
        """Seconds of the device step alone (``step_time`` without ``host``), what an
        executor's timer sees."""
        return self._grouped(self.breakdown(shape), ("host",))

    def _grouped(self, parts: Mapping[str, Any], leave: tuple[str, ...]) -> Any:
        """Sum of ``parts`` but ``leave``, grouped and ordered as the scalar path sums."""
        return _total([sum(parts[n] for n in self._light_names if n not in leave),
                       *(parts[n] for n in self._heavy_names if n not in leave)])

    def wake_time(self, idle_s: float) -> float:
        """Extra seconds of a step that starts after the server sat idle for ``idle_s``
        seconds: ``max_s * (1 - exp(-idle_s / tau_s))``, 0 without a measured ``wake``.
        A pure function of the idle time, so the step's price stays one of its shape."""
        top, tau = self.wake.get("max_s", 0.0), self.wake.get("tau_s", 0.0)
        if idle_s <= 0.0 or top <= 0.0 or tau <= 0.0:
            return 0.0
        return float(wake_curve(float(idle_s), top, tau))

    def replace(self, *, model: ModelSpec | None = None,
                coefs: Mapping[str, Mapping[str, float]] | None = None,
                frontend: Frontend | None = None) -> ProfileCost:
        """The same profile with another model, coefficients or frontend."""
        return ProfileCost(model or self.model, self.tp, self.device, self.dtype,
                           coefs if coefs is not None else self.coefs, self.meta, self.knots,
                           self.wake, frontend if frontend is not None else self.frontend,
                           self.grids, self.experts)

    def with_layers(self, layers: int) -> ProfileCost:
        """The same profile for a model of ``layers`` layers (used to check reduced-depth runs)."""
        return self.replace(model=dataclasses.replace(self.model, layers=layers))
