"""Public end-to-end runs (silicon_sample.csv): rows read and classified, the scenario
each stands for, and the shipped priors' errors on the held-out vLLM rows."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from pathlib import Path

import pytest
from conftest import needs_tables, silicon_csv

from sim.config.scenario import from_dict
from sim.cost.priors import framework_priors
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify
from sim.validate.siliconrecipes import scenario_raw
from sim.validate.siliconrows import read_rows


def csv(tmp_path: Path, *rows: str) -> Path:
    return silicon_csv(tmp_path, list(rows))


ROWS = (
    "a,source_file=x.csv,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,154.2,18.0",
    "b,db-dump/2026; c,sglang,0.5,Qwen/Qwen3-32B,h200_sxm,,agg,4096,512,64,4,1,,900,30",
    "c,x,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,fp4,agg,1024,128,8,2,1,,1,1",
    "d,x,vllm,0.12.0,deepseek-ai/DeepSeek-R1,h200_sxm,,agg,1024,128,8,8,1,,1,1",
    "e,x,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,disagg,1024,128,,,,,1,1",
    "f,x,trtllm,1.0,Qwen/Qwen3-32B,gb200,,agg,1024,128,8,2,1,0,1,1",
    "g,x,vllm,0.12.0,Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,2,,1,1",
    "h,source_file=2026-04-06.csv; model=Llama-3.1-70B,vllm,,meta-llama/Llama-3.1-70B,"
    "h200_sxm,fp8,agg,1024,1024,4,8,1,,73,7.9",
    "i,source_file=/u/aic-auto-gap-analysis/data/h200_sxm/vllm/0.12.0/q.csv,vllm,0.12.0,"
    "Qwen/Qwen3-32B,h100_sxm,,agg,1024,128,8,2,1,,154.2,18.0",
)


@pytest.mark.parametrize(("model", "backend", "system", "kv"), [
    ("openai/gpt-oss-120b", "vllm", "b200_sxm", "fp8"),  # gptoss_fp4_b200.sh
    ("openai/gpt-oss-120b", "vllm", "h200_sxm", "auto"),  # its Hopper recipes keep bf16
    ("meta-llama/Llama-3.1-70B", "trtllm", "b200_sxm", "fp8"),
])
def test_inferencex_recipes_set_the_kv_cache(tmp_path: Path, model: str, backend: str,
                                             system: str, kv: str) -> None:
    label = "fp4" if "gpt-oss" in model else "fp8"
    row = (f"x,source_file=2026-04-06.csv; model=m,{backend},,{model},{system},{label},agg,"
           "1024,1024,4,8,1,,73,7.9")
    case = classify(read_rows(csv(tmp_path, row))[0])
    assert isinstance(case, Case) and case.kv_dtype == kv


@pytest.mark.parametrize(("backend", "version", "label", "dtype", "kv"), [
    ("trtllm", "1.0.0rc3", "fp8", "fp8", "fp8"),  # the ModelOpt export's own FP8 cache
    ("trtllm", "1.0.0rc3", "fp8_block", "fp8-block", "auto"),  # Qwen's release: none
    ("trtllm", "1.0.0rc3", "", "bf16", "auto"),
    ("vllm", "0.12.0", "fp8", "fp8", "auto"),  # auto meant bf16 before PR 29980
])
def test_per_tensor_fp8_qwen3_32b_runs_take_the_exports_kv_cache_under_tensorrt_llm(
        tmp_path: Path, backend: str, version: str, label: str, dtype: str, kv: str) -> None:
    row = (f"x,source_file=/u/aic-auto-gap-analysis/data/h100_sxm/{backend}/{version}/q.csv,"
           f"{backend},{version},Qwen/Qwen3-32B,h100_sxm,{label},agg,4096,256,64,1,1,,1639,102")
    case = classify(read_rows(csv(tmp_path, row))[0])
    assert isinstance(case, Case) and (case.dtype, case.kv_dtype) == (dtype, kv)
    assert case.spec.kv_dtype == kv and case.row.collection == "aic"


def test_rows_are_read_and_classified_with_reasons(tmp_path: Path) -> None:
    rows = read_rows(csv(tmp_path, *ROWS))
    assert [r.line for r in rows] == [2, 3, 4, 5, 6, 7, 8, 9, 10]
    a = classify(rows[0])
    assert isinstance(a, Case) and (a.model, a.gpu, a.framework) == ("qwen3-32b", "h100-sxm",
                                                                      "vllm")
    # InferenceX: its database dump and its dated exports; the rest is AIConfigurator's.
    assert [r.collection for r in rows[:2] + rows[7:]] == ["aic", "inferencex", "inferencex",
                                                           "aic"]
    # The dense FP8 InferenceX row may fit the plain server's per-request latency (its hash
    # puts it in the fit half); AIConfigurator's FP8 rows never fit anything.
    h = classify(rows[7])
    assert isinstance(h, Case) and h.dtype == "fp8" and not h.row.held_out
    assert not h.held_out
    # The same run on a B200 fits nothing: those rows' TTFT shortfall grows with tp, which
    # no per-request latency represents (FRONTEND_UNFIT_GPUS).
    assert dataclasses.replace(h, gpu="b200").held_out
    # InferenceX's recipe for Llama-3.1-70B sets an FP8 KV cache, which its rows do not
    # record; AIConfigurator's rows keep the default.
    assert h.kv_dtype == "fp8" and h.spec.kv_dtype == "fp8" and a.kv_dtype == "auto"
    aic_fp8 = Case(rows[0], "qwen3-32b", "h100-sxm", "vllm", dtype="fp8")
    assert aic_fp8.held_out and not Case(rows[0], "qwen3-32b", "h100-sxm", "vllm").held_out
    reasons = [classify(r) for r in rows[2:7]]
    assert reasons[0].startswith("fp4 weights")
    assert isinstance(reasons[1], Case) and reasons[1].model == "deepseek-r1"
    assert reasons[2].startswith("disaggregated serving")
    assert reasons[3].startswith("system gb200 is not compared: servesim prices public runs "
                                 "on a100-80gb, b200, b300, h100-sxm, h200")
    assert reasons[4].startswith("pipeline (2)")


def test_malformed_rows_name_the_file_line_and_column(tmp_path: Path) -> None:
    bad = ROWS[0].replace(",1024,", ",many,")
    with pytest.raises(ServesimError,
                       match=r"s\.csv: line 2, isl: got 'many', expected a whole number"):
        read_rows(csv(tmp_path, bad))
    # A row cut short after tp_size: no latencies, so it is kept out, with the reason.
    short = read_rows(csv(tmp_path, ",".join(ROWS[0].split(",")[:12])))[0]
    assert math.isnan(short.ttft_ms) and classify(short).startswith("incomplete row")
    with pytest.raises(ServesimError, match=r"line 2, tp_size: got '2.5', expected a whole number"):
        read_rows(csv(tmp_path, ROWS[0].replace(",8,2,1,,", ",8,2.5,1,,")))
    # inf in a count and a zero latency had been tracebacks (OverflowError, division).
    with pytest.raises(ServesimError, match=r"line 2, isl: got 'inf', expected a whole number"):
        read_rows(csv(tmp_path, ROWS[0].replace(",1024,", ",inf,", 1)))
    cells = ROWS[0].split(",")
    cells[-2] = "0"  # the last two cells: measured TTFT and TPOT (ms)
    with pytest.raises(ServesimError, match=r"silicon_ttft_ms: got '0', expected a positive"):
        read_rows(csv(tmp_path, ",".join(cells)))
    (tmp_path / "t.csv").write_text("id,backend\nx,vllm\n")
    with pytest.raises(ServesimError, match="t.csv: missing column 'backend_version'"):
        read_rows(tmp_path / "t.csv")


def test_a_row_becomes_its_closed_loop_benchmark(tmp_path: Path) -> None:
    rows = read_rows(csv(tmp_path, *ROWS))
    a = classify(rows[0])
    assert isinstance(a, Case)
    raw = scenario_raw(a)
    # 8 clients, ten requests each; vLLM v1's defaults on an 80 GB part.
    assert raw["workload"]["concurrency"] == 8 and raw["workload"]["num_requests"] == 80
    assert raw["workload"]["lengths"]["prompt"] == {"dist": "uniform", "low": 819, "high": 1024}
    assert raw["serving"]["policy"] == "chunked" and raw["serving"]["token_budget"] == 8192
    exact = scenario_raw(Case(a.row, a.model, a.gpu, a.framework, "exact"))
    assert exact["workload"]["lengths"]["output"] == {"dist": "fixed", "value": 128}
    b = classify(rows[1])
    assert isinstance(b, Case)
    sg = scenario_raw(b)
    # SGLang keeps 0.88 of the memory for weights and KV: Qwen3-32B over 4 H200s.
    assert sg["serving"]["policy"] == "continuous" and sg["serving"]["block_size"] == 1
    assert 1_000_000 < sg["serving"]["num_gpu_blocks"] < 2_000_000
    sc = from_dict(sg)
    assert sc.workload.concurrency == 64 and sc.serving.num_gpu_blocks > 0


def test_shipped_priors_are_fitted_and_name_their_rows() -> None:
    for fw in ("vllm", "sglang", "trtllm"):
        p = framework_priors(fw)
        assert fw in p.source and "silicon_sample.csv" in p.source
        assert p.step_const_s > 0
    # vLLM and TensorRT-LLM have InferenceX rows: the plain server's per-request latency
    # is fitted there, AIConfigurator's harness keeps its own for its rows.
    for fw in ("vllm", "trtllm"):
        p = framework_priors(fw)
        assert "InferenceX rows" in p.source and p.aic_request_s is not None
        assert p.for_collection("aic").request_s == p.aic_request_s
        assert p.for_collection("inferencex").request_s == p.request_s
    # SGLang has none: its harness's latency serves AIConfigurator's rows only, and the
    # plain server's is not fitted (zero, said in the source).
    sglang = framework_priors("sglang")
    assert sglang.aic_request_s is not None and sglang.aic_request_s > 0
    assert sglang.request_s == 0 and "not fitted" in sglang.source
    assert sglang.for_collection("aic").request_s == sglang.aic_request_s
    assert framework_priors("vllm").aic_client_lengths == "ranged"
    assert sglang.aic_client_lengths == "exact"
    assert framework_priors("tgi").source == "none fitted: zero"


@needs_tables
def test_a_fit_of_some_priors_holds_the_others(tmp_path: Path) -> None:
    from sim.cost.priors import Priors
    from sim.validate.siliconfit import fit_priors

    rows = read_rows(csv(tmp_path, *ROWS))
    case = classify(rows[7])
    assert isinstance(case, Case)
    held = Priors(step_const_s=1e-3, step_per_seq_s=2e-5, request_s=0.5)
    p, n = fit_priors([case], "vllm", "s.csv", keys=("request_s",), held=held)
    assert n == 1 and (p.step_const_s, p.step_per_seq_s) == (1e-3, 2e-5)
    # The source names the CSV fitted on (it had said silicon_sample.csv whatever it was).
    assert p.source == "fitted on 1 vllm rows of s.csv"
    # One row, one unknown: the fit lands on the row's TTFT (73 ms) less what the
    # engine takes, a few tens of milliseconds at most, nowhere near the 0.5 s held.
    assert 0 <= p.request_s < 0.073


@needs_tables
def test_held_out_vllm_rows_stay_within_their_documented_errors(tmp_path: Path) -> None:
    from sim.validate.siliconcli import main

    assert main(["--silicon", "--framework", "vllm", "--out", str(tmp_path)]) == 0
    doc = json.loads((tmp_path / "silicon.json").read_text())
    test = doc["errors"]["vllm"]["test"]
    assert test["ttft"]["rows"] == 48 and test["tpot"]["rows"] == 48
    # docs/validation.md: 18.5% and 2.4% (median |error|, 48 held-out rows).
    assert test["tpot"]["median"] < 0.04 and test["ttft"]["median"] < 0.20


@needs_tables
def test_inferencex_vllm_rows_overlap_the_step_priors(tmp_path: Path) -> None:
    """InferenceX's vLLM runs pass --async-scheduling: the host's step work (the step
    priors) overlaps the GPU's, so a step costs the longer of the two; AIConfigurator's
    rows (vLLM 0.12.0, synchronous) and TensorRT-LLM's (whose fitted priors are what its
    own overlap leaves) pay them in full."""
    import dataclasses

    from sim.cost.eager import EagerSteps, Graphs
    from sim.cost.models import unwrapped
    from sim.cost.overlap import HostOverlap
    from sim.cost.priors import Priors
    from sim.cost.shape import decode_shape, shape_of
    from sim.validate.siliconfit import _cost

    rows = read_rows(csv(tmp_path, *ROWS))
    plain, aic = classify(rows[7]), classify(rows[0])
    assert isinstance(plain, Case) and isinstance(aic, Case)
    p = Priors(step_const_s=1e-3, step_per_seq_s=2e-5, request_s=0.01)
    over = _cost(plain, p)
    assert isinstance(over, HostOverlap) and over.frontend.request_s == 0.01
    assert unwrapped(over).coefs["step"]["const_s"] == 1e-3
    long, one = shape_of([(8192, 0)]), decode_shape(1, 100)
    assert over.host_time(one) == pytest.approx(1e-3 + 2e-5, rel=1e-12)
    # A long prefill hides the host work; the priors are not added to it.
    assert over.step_time(long) == pytest.approx(over.cost.step_time(long) - 1.02e-3,
                                                 rel=1e-12)
    assert not isinstance(_cost(aic, p), HostOverlap)
    assert unwrapped(_cost(aic, p)).coefs["step"]["const_s"] == 1e-3
    trt = dataclasses.replace(plain, framework="trtllm")
    assert unwrapped(_cost(trt, p)).coefs["step"]["per_seq_s"] == 2e-5
    # TensorRT-LLM runs its prefill steps without CUDA graphs (sim/cost/eager.py).
    eager = _cost(trt, p)
    assert isinstance(eager, EagerSteps) and eager.graphs == Graphs("decode")
    # vLLM graphs every step of up to 512 tokens (1,024 sequences, 8,192 a step).
    assert isinstance(over.cost, EagerSteps) and over.cost.graphs == Graphs("all", max_tokens=512)
    # Each row pays its own collection's per-request latency.
    both = dataclasses.replace(p, aic_request_s=0.05)
    assert _cost(aic, both).frontend.request_s == 0.05
    assert _cost(plain, both).frontend.request_s == 0.01


@pytest.mark.parametrize(("text", "where"), [
    ("- a list\n", "(top level): got ['a list'], expected a mapping"),
    ("frameworks: {vllm: 3}\n", "frameworks.vllm: got 3, expected a mapping"),
    ("frameworks: {vllm: {values: {step_const_s: 1, step_per_seq_s: 0}}}\n",
     "frameworks.vllm.values.request_s: required key is missing"),
    ("frameworks: {vllm: {values: {step_const_s: fast, step_per_seq_s: 0, request_s: 0}}}\n",
     "frameworks.vllm.values.step_const_s: got 'fast', expected seconds >= 0"),
    ("frameworks: {vllm: {values: {step_const_s: 0, step_per_seq_s: 0, request_s: 0},\n"
     "  aic_client_lengths: wide}}\n", "frameworks.vllm.aic_client_lengths: got 'wide'"),
    ("frameworks: {vllm: {values: {step_const_s: 0, step_per_seq_s: 0, request_s: 0,\n"
     "  aic_request_s: -1}}}\n",
     "frameworks.vllm.values.aic_request_s: got -1, expected seconds >= 0"),
])
def test_malformed_priors_name_the_key(tmp_path: Path, text: str, where: str) -> None:
    from sim.cost.priors import load_priors

    path = tmp_path / "priors.yaml"
    path.write_text(text)
    with pytest.raises(ServesimError, match=re.escape(f"priors.yaml: {where}")):
        load_priors(path)


LLAMA70_TRT = ("x,source_file=2026-01-10.csv; model=Llama-3.1-70B,trtllm,,meta-llama/Llama-3.1-70B,"
               "{system},fp8,agg,{isl},{osl},16,{tp},1,1,300,10")


@pytest.mark.parametrize(("system", "isl", "osl", "tp", "want"), [
    # 70b_fp8_b200_trt_slurm.sh: --max_num_tokens 16384; batch waiting for 1k/1k below tp 8.
    ("b200_sxm", 1024, 1024, 2, {"max_num_batched_tokens": 16384,
                                 "batch_wait_timeout_iters": 20,
                                 "batch_wait_max_tokens_ratio": 0.9}),
    ("b200_sxm", 1024, 1024, 8, {"max_num_batched_tokens": 16384}),
    ("b200_sxm", 1024, 8192, 2, {"max_num_batched_tokens": 16384}),
    # 70b_fp8_h200_trt_slurm.sh: --max_num_tokens $MAX_MODEL_LEN, ISL + OSL in its sweeps.
    ("h200_sxm", 8192, 1024, 4, {"max_num_batched_tokens": 9216}),
    ("h200_sxm", 1024, 1024, 4, {"max_num_batched_tokens": 2048,
                                 "batch_wait_timeout_iters": 20,
                                 "batch_wait_max_tokens_ratio": 0.9}),
])
def test_tensorrt_llm_llama70b_rows_run_as_their_recipe_launched_them(
        tmp_path: Path, system: str, isl: int, osl: int, tp: int, want: dict) -> None:
    from conftest import silicon_csv

    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrecipes import recipe, scenario_raw
    from sim.validate.siliconrows import read_rows

    line = LLAMA70_TRT.format(system=system, isl=isl, osl=osl, tp=tp)
    case = classify(read_rows(silicon_csv(tmp_path, [line]))[0])
    assert isinstance(case, Case) and case.row.collection == "inferencex"
    assert recipe(case) == want
    serving = scenario_raw(case)["serving"]
    assert serving["policy"] == "orca"
    assert {k: serving[k] for k in want} == want


def test_a_vllm_row_with_an_fp8_kv_cache_sizes_its_cache_in_fp8(tmp_path: Path) -> None:
    # InferenceX's vLLM Llama-3.1-70B recipes set kv-cache-dtype fp8. The profile prices
    # FP8-KV attention, and vLLM's memory model must size the cache at one byte an
    # element too (it once used the preset's bf16: half the blocks, and starved runs).
    from conftest import silicon_csv

    from sim.config.scenario import from_dict
    from sim.cost.gpus import GPUS
    from sim.cost.memory import memory_budget
    from sim.validate.silicon import Case, classify
    from sim.validate.siliconrecipes import scenario_raw
    from sim.validate.siliconrows import read_rows

    line = ("x,source_file=2026-01-10.csv; model=Llama-3.1-70B,vllm,,meta-llama/Llama-3.1-70B,"
            "h200_sxm,fp8,agg,1024,8192,32,1,1,1,300,10")
    case = classify(read_rows(silicon_csv(tmp_path, [line]))[0])
    assert isinstance(case, Case) and case.kv_dtype == "fp8"
    raw = scenario_raw(case)
    assert raw["model"] == {"preset": "llama-3.1-70b", "dtype": "fp8", "kv_dtype": "fp8"}
    sc = from_dict(raw, "<row>")
    assert sc.model.kv_dtype == "fp8" and sc.model == case.spec
    sv = sc.serving
    fp8 = memory_budget(case.spec, GPUS["h200"], 1, 0.9, sv.block_size,
                        sv.max_num_batched_tokens, sv.max_num_seqs).blocks
    bf16 = memory_budget(dataclasses.replace(case.spec, kv_dtype="auto"), GPUS["h200"], 1, 0.9,
                         sv.block_size, sv.max_num_batched_tokens, sv.max_num_seqs).blocks
    assert fp8 == 2 * bf16 or fp8 == 2 * bf16 + 1


@pytest.mark.parametrize(("backend", "version", "measured", "source", "mtp"), [
    # The day InferenceX ran its TensorRT-LLM MTP configurations on release 1.1.0rc2.post2.
    ("trtllm", "1.1.0rc2.post2", "2026-01-14", "source_file=2026-04-06.csv", True),
    # Its plain runs of the same release, a month before.
    ("trtllm", "1.1.0rc2.post2", "2025-12-15", "db-dump/2026-04-27", False),
    # Only the MTP configurations ran 1.2.0rc6.post3, on any day.
    ("trtllm", "1.2.0rc6.post3", "2026-02-05", "source_file=2026-03-25.csv", True),
    ("trtllm", "1.2.0rc6.post2", "2026-01-29", "source_file=2026-03-25.csv", False),
    # Another framework on that day, and another collection, are not those runs.
    ("sglang", "1.1.0rc2.post2", "2026-01-14", "source_file=2026-04-06.csv", False),
    ("trtllm", "1.1.0rc2.post2", "2026-01-14", "source_file=/u/gap/q.csv", False),
])
def test_inferencex_mtp_runs_are_kept_out_with_their_reason(
        tmp_path: Path, backend: str, version: str, measured: str, source: str,
        mtp: bool) -> None:
    row = (f"x,{source}; model=DeepSeek-R1; measured={measured}T00:00:00.000Z,{backend},"
           f"{version},deepseek-ai/DeepSeek-R1,h200_sxm,fp8,agg,1024,8192,4,8,1,,494,7.1")
    read = read_rows(csv(tmp_path, row))[0]
    assert read.measured == measured and read.unlabelled_mtp == mtp
    got = classify(read)
    if mtp:
        assert isinstance(got, str) and got.startswith("speculative decoding (multi-token "
                                                       "prediction) that the row does not")
        # docs/scripts/mtp_rows.py asks for the plain recipe's case to add the drafting.
        plain = classify(read, mtp_as_plain=True)
        assert isinstance(plain, Case) and plain.model == "deepseek-r1"
    else:
        assert isinstance(got, Case) and got.model == "deepseek-r1"


def test_a_run_exported_under_several_ids_counts_once_in_the_medians() -> None:
    from sim.validate.siliconfit import summary

    # One run, exported three times: two ids labelled DeepSeek-R1, one DeepSeek-V3, and a
    # mean that differs in its last bit between exports. Two other runs beside it.
    run = {"framework": "sglang", "version": "0.5.9", "dtype": "fp8-block", "gpu": "h200",
           "tp": 8, "isl": 1024, "osl": 8192, "concurrency": 64, "split": "test",
           "ttft_ms": 264.8804558055417, "tpot_ms": 15.855620048654977,
           "ttft_err": 0.1, "tpot_err": 0.02}
    copies = [{**run, "id": "a", "model": "deepseek-r1"},
              {**run, "id": "b", "model": "deepseek-r1", "tpot_ms": 15.855620048654975},
              {**run, "id": "c", "model": "deepseek-v3"}]
    others = [{**run, "id": "d", "concurrency": 128, "ttft_err": -0.5, "tpot_err": 0.3},
              {**run, "id": "e", "ttft_ms": 300.0, "ttft_err": 0.6, "tpot_err": -0.4}]
    m = summary(copies + others)["sglang fp8"]["test"]
    # Counted by row the median would be 0.1 (three of five); by run it is 0.5.
    assert (m["ttft"]["rows"], m["ttft"]["runs"]) == (5, 3)
    assert m["ttft"]["median"] == pytest.approx(0.5)
    assert m["tpot"]["median"] == pytest.approx(0.3)
