"""TensorRT-LLM's per-tensor FP8 and its NVFP4 GEMM rows time the quantisation of their
bf16 input; the projections of its served models are priced without it
(sim/cost/tables/gemmtable.py, QUANT_IN_ROWS)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables

from sim.cost.tables.gemmtable import input_quant_seconds
from sim.cost.tables.kerneltables import Table
from sim.errors import ServesimError


def _table(fp8_us: float, bf16_us: float, with_fp8: bool = True,
           quant: tuple[str, float] = ("fp8", 1.0)) -> Table:
    """GEMM rows whose time is an intercept (us) plus weight bytes at 4 TB/s, at 1-4
    tokens, plus rows the fit must leave out (16 tokens; weights past 128 Mi elements):
    bf16 at 2 bytes a weight, and the quantised ``quant`` (the tables' dtype name, bytes a
    weight) with intercept ``fp8_us``."""
    cols: dict[str, list] = {"gemm_dtype": [], "m": [], "n": [], "k": [], "latency": []}
    for dtype, size, icpt in (("bfloat16", 2.0, bf16_us), (*quant, fp8_us)):
        if dtype == quant[0] and not with_fp8:
            continue
        for m in (1, 4, 16):
            for n, k in ((2048, 2048), (4096, 4096), (8192, 8192), (16384, 16384)):
                off = 50.0 if m == 16 or n * k > 2 ** 27 else 0.0  # nonlinear: left out
                cols["gemm_dtype"].append(dtype)
                for key, v in (("m", m), ("n", n), ("k", k)):
                    cols[key].append(v)
                cols["latency"].append((icpt + off + n * k * size / 4e12 * 1e6) / 1e3)
    return Table("gemm_perf", Path("synthetic"), "0",
                 {k: np.asarray(v) for k, v in cols.items()})


def test_the_input_quantisation_is_the_fp8_rows_intercept_over_the_bf16_rows() -> None:
    assert input_quant_seconds(_table(13.0, 4.0)) == pytest.approx(9e-6, abs=1e-12)
    # FP8 rows no slower than bf16 ones at equal bytes: nothing to take off.
    assert input_quant_seconds(_table(3.0, 4.0)) == 0.0
    with pytest.raises(ServesimError, match="too few fp8 GEMM rows at 1-4 tokens"):
        input_quant_seconds(_table(13.0, 4.0, with_fp8=False))
    # NVFP4 rows the same way, their weight bytes at 4.5 bits (0.5625 bytes) a weight.
    nvfp4 = _table(15.0, 4.0, quant=("nvfp4", 0.5625))
    assert input_quant_seconds(nvfp4, "nvfp4") == pytest.approx(11e-6, abs=1e-12)


@needs_tables
def test_tensorrt_llm_fp8_projections_are_priced_without_their_input_quantisation() -> None:
    from sim.cost.presets import MODELS
    from sim.cost.tables.gemmtable import gemm_table, projection_gemms
    from sim.cost.tables.kerneltables import coverage
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    version = coverage()["h200"]["trtllm"][-1]
    raw = gemm_table("h200", "trtllm", version, "fp8")
    got, fw, v = projection_gemms("h200", "trtllm", version, "fp8")
    assert (fw, v) == ("trtllm", version)
    # 8.64 us on H200 (1.3.0rc20): between vLLM's FP8 rows' static cast (about 5 us) and
    # the 11.8 us floor of TensorRT-LLM's own FP8 rows.
    q = got.input_quant_s
    assert 7e-6 < q < 10e-6
    bf16_floor = float(gemm_table("h200", "trtllm", version, "bf16").table.cube.min())
    np.testing.assert_allclose(got.table.cube, np.maximum(raw.table.cube - q, bf16_floor))
    # Llama-3.1-70B's gate and up projections on 8 GPUs at one token: one call less q.
    assert got.table.at(1, 7168, 8192) == pytest.approx(raw.table.at(1, 7168, 8192) - q)
    # vLLM's rows are read as they are (its served FP8 models cast their input too).
    assert projection_gemms("h200", "vllm", coverage()["h200"]["vllm"][-1],
                            "fp8")[0].input_quant_s == 0.0
    m = dataclasses.replace(MODELS["llama-3.1-70b"], dtype="fp8")
    notes = build_profile(BuildSpec(m, "h200", "trtllm", 8))["source"]["notes"]
    assert any(f"(torch_flow) less {q * 1e6:.1f} us a call" in n for n in notes)
