"""The collective tables' message sizes are element counts: a row is priced at
message_size × its dtype's bytes (sim/cost/tables/commtable.py)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from conftest import needs_tables

from sim.cost.tables.commtable import _curve, load_collectives
from sim.cost.tables.kerneltables import Table
from sim.errors import ServesimError


def _table(dtypes: list[str]) -> Table:
    n = len(dtypes)
    return Table("nccl_perf", Path("nccl_perf.parquet"), "2.29.2", {
        "num_gpus": np.full(n, 8), "nccl_dtype": np.array(dtypes),
        "message_size": np.array([1024.0 * 4**i for i in range(n)]),
        "latency": np.array([0.01 * (i + 1) for i in range(n)])})


@pytest.mark.parametrize(("dtype", "width"), [("half", 2), ("bfloat16", 2), ("int8", 1),
                                              ("float32", 4)])
def test_sizes_are_elements_of_the_rows_dtype(dtype: str, width: int) -> None:
    curve = _curve(_table([dtype] * 3), 8, "nccl_dtype")
    assert curve.sizes.tolist() == [1024.0 * width, 4096.0 * width, 16384.0 * width]
    # 1,024 elements of the dtype take the first row's 0.01 ms.
    assert curve.at(1024 * width) == pytest.approx(1e-5)
    # Past the largest row, in proportion to the bytes.
    assert curve.at(2 * 16384 * width) == pytest.approx(2 * 3e-5)


def test_a_table_mixing_dtypes_or_without_one_is_refused() -> None:
    with pytest.raises(ServesimError, match=r"expected one nccl_dtype .* found \['half', 'int8'\]"):
        _curve(_table(["half", "int8", "half"]), 8, "nccl_dtype")
    bare = _table(["half"])
    bare = Table(bare.name, bare.path, bare.version,
                 {k: v for k, v in bare.columns.items() if k != "nccl_dtype"})
    with pytest.raises(ServesimError, match="nccl_perf.parquet: no nccl_dtype column"):
        _curve(bare, 8, "nccl_dtype")


@needs_tables
def test_h100_nvlink_all_reduce_moves_what_nccl_tests_report() -> None:
    """Read as elements, 8 H100s all-reduce at about 445 GB/s of bus bandwidth (NVLink 4;
    nccl-tests report 450-480) and 8 A100s at about 220 GB/s (NVLink 3); read as bytes
    these would be half."""
    for gpu, low, high in (("h100-sxm", 380e9, 500e9), ("a100-80gb", 190e9, 250e9)):
        comm = load_collectives(gpu, "vllm", "0.24.0", 8)
        nbytes = comm.nccl.sizes[-1]
        busbw = 2 * 7 / 8 * nbytes / comm.nccl.seconds[-1]
        assert low < busbw < high, (gpu, busbw)


@needs_tables
def test_a_decode_all_reduce_is_the_graph_row_of_its_element_count() -> None:
    """Eight tokens of a 4,096-wide hidden state: 32,768 bf16 elements, 64 KiB, priced
    at the custom all-reduce's graph-captured row of 32,768 elements."""
    from sim.cost.tables.kerneltables import load_table

    comm = load_collectives("h100-sxm", "vllm", "0.24.0", 2)
    rows = load_table("h100-sxm", "comm", "vllm", "0.24.0", "custom_allreduce_perf").where(
        num_gpus=2, backend="vllm_graph", message_size=32768)
    assert len(rows) == 1
    got = comm.allreduce(np.array([8 * 4096 * 2.0]), np.array([True]))
    assert got[0] == pytest.approx(rows.columns["latency"][0] / 1e3, rel=1e-12)


@needs_tables
@pytest.mark.parametrize("gpu", ["l40s", "rtx-pro-6000"])
def test_more_than_two_pcie_gpus_all_reduce_on_nccl_at_every_size(gpu: str) -> None:
    """vLLM and SGLang turn their custom all-reduce off over more than two GPUs joined by
    PCIe alone; its table had priced small messages until 8 MiB, where the price fell to
    NCCL's (a 1,025-token step of Llama-3-8B on 4 L40S under SGLang: 181 ms after 241 ms
    at 1,024 tokens)."""
    small = np.array([64 * 1024.0, 1024 * 1024.0])
    for fw in ("vllm", "sglang"):
        four = load_collectives(gpu, fw, "0.24.0" if fw == "vllm" else "0.5.14", 4)
        assert four.custom_max == 0
        assert four.allreduce(small, np.array([True, False])).tolist() == \
            four.nccl.at(small).tolist()
        assert "NCCL at every size" in four.sources["custom_allreduce"]
        two = load_collectives(gpu, fw, "0.24.0" if fw == "vllm" else "0.5.14", 2)
        assert two.custom_max == 8 * 2**20  # two GPUs: over PCIe peer to peer, allowed
    assert load_collectives("h100-sxm", "vllm", "0.24.0", 4).custom_max == 8 * 2**20
    assert load_collectives(gpu, "trtllm", "1.3.0rc20", 4).custom_max is None
