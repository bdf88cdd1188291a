"""Unit checks of the small pieces: allocator, histogram, cost models, workloads, configs."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.configtools import build
from sim.core.histogram import LogHistogram
from sim.core.kvmanager import KVCacheManager
from sim.core.request import Request
from sim.cost.gpus import GPUS
from sim.cost.kvpages import blocks_for
from sim.cost.memory import kv_capacity_blocks
from sim.cost.models import LinearCost
from sim.cost.presets import MODELS
from sim.cost.roofline import RooflineCost, RooflineParams
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.errors import ServesimError
from sim.workload.build import build_requests
from sim.workload.requests import WorkloadConfig


@given(st.lists(st.tuples(st.booleans(), st.integers(0, 40 * 16)), max_size=200))
def test_allocator_never_over_allocates(ops: list[tuple[bool, int]]) -> None:
    kv = KVCacheManager(100, 16, watermark_blocks=5)
    held: list[Request] = []
    for take, n in ops:
        if take:
            r = Request(len(held), 0.0, max(n, 1), 1)
            fits = kv.can_allocate(blocks_for(n, 16))
            got = kv.allocate_slots(r, n)
            assert (got is not None) == fits
            if got is not None:
                assert got == r.blocks == blocks_for(n, 16)
                held.append(r)
        elif held:
            kv.free(held.pop())
        assert 0 <= kv.used <= kv.total
        assert kv.used == sum(r.blocks for r in held)
        assert kv.num_free == kv.total - kv.used


def test_allocator_watermark_and_double_free() -> None:
    kv = KVCacheManager(10, 4, watermark_blocks=2)
    assert kv.can_allocate(8, keep_watermark=True)
    assert not kv.can_allocate(9, keep_watermark=True)
    assert kv.can_allocate(10)
    r = Request(0, 0.0, 12, 1)
    assert kv.allocate_slots(r, 12) == 3
    r.blocks = 4  # a request claiming more than it was given
    with pytest.raises(AssertionError):
        kv.free(r)
    assert blocks_for(0, 4) == 0 and blocks_for(1, 4) == 1 and blocks_for(8, 4) == 2


def test_kv_capacity_llama3_8b_h100() -> None:
    # Worked term by term in tests/test_memory.py.
    blocks = kv_capacity_blocks(MODELS["llama-3-8b"], GPUS["h100-sxm"], 1, 0.9, 16)
    assert blocks == 28_324
    # Tensor parallelism shards both weights and KV: more than twice the blocks on 2 GPUs.
    assert kv_capacity_blocks(MODELS["llama-3-8b"], GPUS["h100-sxm"], 2, 0.9, 16) > 2 * blocks


@settings(max_examples=50)
@given(st.lists(st.floats(1e-6, 1e3), min_size=1, max_size=2000), st.floats(0, 1))
def test_histogram_quantiles_within_relative_accuracy(values: list[float], q: float) -> None:
    h = LogHistogram(rel_accuracy=0.01)
    h.add_many(np.array(values))
    v = np.sort(values)
    rank = q * (len(v) - 1)
    lo, hi = v[int(np.floor(rank))], v[int(np.ceil(rank))]
    got = h.quantile(q)
    assert lo * (1 - 0.0101) <= got <= hi * (1 + 0.0101)
    assert h.mean == pytest.approx(np.mean(values))


def test_histogram_merge_and_buffer() -> None:
    a, b = LogHistogram(), LogHistogram()
    for x in range(1, 1001):
        (a if x % 2 else b).add(x * 1e-3)
    a.merge(b)
    assert a.total == 1000
    assert a.quantile(0.5) == pytest.approx(0.5, rel=0.01)
    assert a.max == pytest.approx(1.0)


def test_shape_of_counts_pairs_and_kv() -> None:
    s = shape_of([(10, 0), (1, 30), (4, 6)])
    assert s == StepShape(seqs=3, new_tokens=15, context_tokens=36, prefill_seqs=2,
                          prefill_tokens=14, prefill_pairs=55 + 4 * 6 + 10, decode_kv=31)
    assert decode_shape(2, 30) == shape_of([(1, 10), (1, 20)])


def test_batch_shape_agrees_with_shape_of() -> None:
    from sim.core.request import Request
    from sim.cost.shape import batch_shape

    reqs = [Request(i, 0.0, 50, 10) for i in range(3)]
    reqs[1].computed, reqs[2].computed = 30, 12
    batch = {reqs[0]: 10, reqs[1]: 1, reqs[2]: 5}
    assert batch_shape(batch) == shape_of([(10, 0), (1, 30), (5, 12)])


def test_linear_cost_is_the_formula() -> None:
    c = LinearCost(step_s=0.01, per_new_token_s=1e-3, per_context_token_s=1e-5, per_seq_s=1e-4)
    assert c.step_time(shape_of([(10, 0), (1, 100)])) == pytest.approx(
        0.01 + 11e-3 + 100e-5 + 2e-4)


def test_roofline_decode_is_memory_bound_and_prefill_compute_bound() -> None:
    m, g = MODELS["llama-3-8b"], GPUS["h100-sxm"]
    # Overheads and kernel floors aside, a decode step is its weight read.
    p = RooflineParams(step_overhead_s=0.0, per_seq_overhead_s=0.0, kernel_floor_s=0.0,
                       attention_floor_s=0.0)
    c = RooflineCost(m, g, 1, p)
    # Every weight but the embedding table (a lookup reads only its rows) is read per step.
    read = (m.params - m.embedding_params) * m.dtype_bytes
    weights_s = read / (g.mem_bw * p.bandwidth_efficiency)
    one = c.step_time(decode_shape(1, 100))
    assert one == pytest.approx(weights_s, rel=0.01)  # reading the weights dominates
    # 8 decodes cost barely more than 1; a 4096-token prefill costs ~ its FLOPs.
    assert c.step_time(decode_shape(8, 800)) < 1.05 * one
    flops_s = 2 * m.layers * m.linear_params_per_layer * 4096 / (g.flops * p.flops_efficiency)
    pre = c.step_time(shape_of([(4096, 0)]))
    assert flops_s < pre < 1.5 * flops_s
    # Vectorised over steps, identical to scalar calls.
    seqs = np.array([1, 8, 64])
    ctx = np.array([100, 800, 64000])
    vec = c.step_time(StepShape(seqs, seqs, ctx, 0, 0, 0, ctx + seqs))
    pairs = zip(seqs, ctx, strict=True)
    assert vec.tolist() == [c.step_time(decode_shape(int(a), int(b))) for a, b in pairs]


def test_roofline_tensor_parallel_adds_allreduce_but_is_faster() -> None:
    m, g = MODELS["llama-3-70b"], GPUS["h100-sxm"]
    p = RooflineParams()
    t2 = RooflineCost(m, g, 2, p).step_time(decode_shape(32, 32000))
    t4 = RooflineCost(m, g, 4, p).step_time(decode_shape(32, 32000))
    assert t4 < t2
    assert RooflineCost(m, g, 4, p)._ar_fixed_s == 2 * 80 * g.link_latency_s


def _wl(**kw):
    return build(WorkloadConfig, kw, "workload")


def test_poisson_rate_and_lengths() -> None:
    cfg = _wl(arrivals={"process": "poisson", "rate": 20.0},
              lengths={"prompt": {"dist": "uniform", "low": 5, "high": 9},
                       "output": {"dist": "lognormal", "median": 50, "sigma": 0.5,
                                  "min": 10, "max": 80}},
              num_requests=20000)
    r = build_requests(cfg, None, np.random.default_rng(0))
    assert len(r) == 20000 and r.arrival_s[0] == 0.0
    assert np.all(np.diff(r.arrival_s) >= 0)
    assert (len(r) - 1) / r.arrival_s[-1] == pytest.approx(20.0, rel=0.03)
    assert set(np.unique(r.prompt_tokens)) == {5, 6, 7, 8, 9}
    assert r.output_tokens.min() >= 10 and r.output_tokens.max() <= 80
    assert np.median(r.output_tokens) == pytest.approx(50, abs=2)


def test_gamma_cv_and_duration() -> None:
    cfg = _wl(arrivals={"process": "gamma", "rate": 10.0, "cv": 3.0},
              lengths={"prompt": {"dist": "fixed", "value": 5},
                       "output": {"dist": "fixed", "value": 5}},
              duration_s=2000.0)
    r = build_requests(cfg, None, np.random.default_rng(1))
    gaps = np.diff(r.arrival_s)
    assert gaps.std() / gaps.mean() == pytest.approx(3.0, rel=0.1)
    assert r.arrival_s[-1] < 2000.0 and len(r) == pytest.approx(20000, rel=0.1)


def test_constant_arrivals_start_at_start_s() -> None:
    cfg = _wl(arrivals={"process": "constant", "rate": 4.0, "start_s": 1.0},
              lengths={"prompt": {"dist": "fixed", "value": 5},
                       "output": {"dist": "fixed", "value": 5}},
              num_requests=3)
    r = build_requests(cfg, None, np.random.default_rng(1))
    assert r.arrival_s.tolist() == [1.0, 1.25, 1.5]


@pytest.mark.parametrize("raw, where", [
    ({"arrivals": {"process": "gamma", "rate": 1.0}, "lengths": {"empirical": "x"},
      "num_requests": 1}, "workload.arrivals.cv"),
    ({"arrivals": {"process": "poisson", "rate": 1.0}, "lengths": {"empirical": "x"}},
     "workload.num_requests"),
    ({"arrivals": {"process": "poisson", "rate": 1.0},
      "lengths": {"prompt": {"dist": "fixed", "value": 3}}, "num_requests": 1},
     "workload.lengths.output"),
    ({"arrivals": {"process": "poisson", "rate": 1.0},
      "lengths": {"prompt": {"dist": "fixed", "low": 3}, "output": {"dist": "fixed",
                                                                   "value": 1}},
      "num_requests": 1}, "workload.lengths.prompt.value"),
])
def test_workload_validation_names_the_key(raw: dict, where: str) -> None:
    with pytest.raises(ServesimError) as info:
        _wl(**raw)
    assert info.value.where == where


def test_summary_of_arrivals_nanoseconds_apart_is_finite() -> None:
    # Found by hypothesis: a queue-growth fit over a span of 1e-174 s failed to converge.
    from conftest import run_requests, tiny_scenario

    from sim.report.summary import summarize

    res = run_requests(tiny_scenario(), [0.0, 1.874959363376289e-174], [1, 1], [1, 1])
    sat = summarize(res)["saturation"]
    assert sat["offered_rps"] > 1e170 and sat["saturated"] in (True, False)


def test_gaps_priced_out_of_range_add_without_a_numpy_warning() -> None:
    """Gaps near the float limit sum to inf; the run is refused after it with one line,
    which numpy's overflow warning had preceded (H14)."""
    import warnings

    h = LogHistogram()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        h.add_many(np.array([1e308, 1e308]))
        h.add_many(np.array([1e308, 1e308]), np.array([2, 3]))
    assert h.sum == float("inf") and h.total == 7
