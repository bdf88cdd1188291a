"""Inputs a fuzzing pass found read silently or named unclearly: Azure traces that mix
timestamps with and without a UTC offset or carry finer fractions than Azure writes,
config.json quantisation module lists, RoPE mappings, head_dim and GPTQ bits, a
wrapper's empty text_config, and silicon CSV cells with spaces or a tp_size the model
cannot split over. Each is refused in one line naming the file, the key or line, the
value and what is allowed, or read as HuggingFace and vLLM read it."""

from __future__ import annotations

import json
import re
import warnings
from pathlib import Path
from typing import Any

import pytest
from conftest import needs_tables, one_line, silicon_csv

from sim.cli import main
from sim.cost.hfconfig import from_hf_config
from sim.cost.hfquant import weights_dtype
from sim.errors import ServesimError
from sim.validate.silicon import Case, classify
from sim.validate.siliconrows import read_rows
from sim.workload import traceio, traces

ROOT = Path(__file__).resolve().parents[1]
OSS = json.loads((ROOT / "sim" / "data" / "models" / "gpt-oss-20b" / "config.json")
                 .read_text())
LLAMA = {"model_type": "llama", "hidden_size": 4096, "num_attention_heads": 32,
         "num_key_value_heads": 8, "num_hidden_layers": 32, "intermediate_size": 14336,
         "vocab_size": 128256, "max_position_embeddings": 8192, "rope_theta": 500000.0}
AZURE_HEAD = "TIMESTAMP,ContextTokens,GeneratedTokens\n"


def _azure(tmp_path: Path, *stamps: str) -> Path:
    path = tmp_path / "az.csv"
    path.write_text(AZURE_HEAD + "".join(f"{s},374,44\n" for s in stamps))
    return path


def _config(tmp_path: Path, cfg: dict[str, Any]) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def _oss(tmp_path: Path, **over: Any) -> Path:
    """gpt-oss-20b's shipped config.json with top-level keys replaced (None: removed)."""
    cfg = {k: v for k, v in {**OSS, **over}.items() if v is not None or k not in over}
    return _config(tmp_path, cfg)


# --- Azure traces --------------------------------------------------------------------

@pytest.mark.parametrize(("first", "second", "this", "other"), [
    ("2023-11-16 18:15:46+01:00", "2023-11-16 18:15:50", "has no", "has one"),
    ("2023-11-16 18:15:46", "2023-11-16 18:15:50Z", "has a", "has none"),
])
def test_azure_rows_with_and_without_an_offset_are_refused(
        tmp_path: Path, first: str, second: str, this: str, other: str) -> None:
    # A naive row had been read as UTC: 3604 s after an 18:15:46+01:00 row, not 4 s.
    path = _azure(tmp_path, first, second)
    with pytest.raises(ServesimError) as err:
        traces.load_trace(path, "azure")
    assert str(err.value) == (
        f"{path}: line 3: TIMESTAMP = '{second}' {this} UTC offset but line 2 ('{first}') "
        f"{other}; write every row with an offset (Z or +HH:MM) or every row without")


def test_azure_offset_mix_is_refused_across_chunks(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    # The first chunk sets how the file is written; a later chunk may not change it.
    monkeypatch.setattr(traceio, "CHUNK_ROWS", 2)
    path = _azure(tmp_path, "2023-11-16 18:15:46+00:00", "2023-11-16 18:15:47+00:00",
                  "2023-11-16 18:15:48")
    with pytest.raises(ServesimError, match=re.escape(
            "line 4: TIMESTAMP = '2023-11-16 18:15:48' has no UTC offset but line 2 "
            "('2023-11-16 18:15:46+00:00') has one")):
        traces.load_trace(path, "azure")


def test_azure_rows_all_with_offsets_or_all_without_are_read(tmp_path: Path) -> None:
    labelled = traces.load_trace(_azure(tmp_path, "2023-11-16 18:15:46+01:00",
                                        "2023-11-16 17:15:50Z"), "azure")
    assert list(labelled.arrival_s) == [0.0, 4.0]
    naive = traces.load_trace(_azure(tmp_path, "2023-11-16 18:15:46",
                                     "2023-11-16 18:15:50"), "azure")
    assert list(naive.arrival_s) == [0.0, 4.0]


@pytest.mark.parametrize("fraction", ["68059001", "123456789123"])
def test_azure_fractions_finer_than_100_ns_are_refused(tmp_path: Path, fraction: str) -> None:
    path = _azure(tmp_path, f"2023-11-16 18:15:46.{fraction}", "2023-11-16 18:15:50")
    with pytest.raises(ServesimError) as err:
        traces.load_trace(path, "azure")
    assert str(err.value) == (
        f"{path}: line 2: TIMESTAMP = '2023-11-16 18:15:46.{fraction}' has {len(fraction)} "
        "fractional digits; at most 7 are allowed (100 ns ticks, as Azure writes times)")


def test_azure_seven_fractional_digits_are_read_to_the_tick(tmp_path: Path) -> None:
    trace = traces.load_trace(_azure(tmp_path, "2023-11-16 18:15:46.0000000",
                                     "2023-11-16 18:15:46.0000001"), "azure")
    assert trace.arrival_s[1] == pytest.approx(1e-7, abs=1e-12)


@pytest.mark.parametrize("stamp", ["2023-11-16", "2023-11-16 18:17", "2023-11-16 18:17:03.",
                                   "2023-11-16 18:17:03 UTC"])
def test_azure_times_without_seconds_are_refused(tmp_path: Path, stamp: str) -> None:
    """A date alone was read as midnight and HH:MM as second 0, so a file cut to days or
    minutes replayed as bursts without a word."""
    path = _azure(tmp_path, "2023-11-16 18:15:46", stamp)
    with pytest.raises(ServesimError) as err:
        traces.load_trace(path, "azure")
    assert str(err.value) == (
        f"{path}: line 3: TIMESTAMP = {stamp!r} is not a date and time to the second like "
        "'2023-11-16 18:17:03.9799600' (YYYY-MM-DD HH:MM:SS, a fraction with digits after "
        "its dot)")


def test_azure_iso_t_and_a_space_before_the_offset_are_read_quietly(tmp_path: Path) -> None:
    """A space before the UTC offset had been left in, and numpy warned of it on stderr."""
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        spaced = traces.load_trace(_azure(tmp_path, "2023-11-16 18:17:03 +01:00",
                                          "2023-11-16T18:17:04 Z"), "azure")
    assert list(spaced.arrival_s) == [0.0, 3601.0]


# --- quantization_config module lists ------------------------------------------------

@pytest.mark.parametrize("value", [[1, 2], "lm_head", {"a": 1}, ["lm_head", 3]])
def test_a_module_list_of_the_wrong_type_is_refused(tmp_path: Path, value: Any) -> None:
    # [1, 2] or "lm_head" had matched no module: attention was taken as mxfp4 and the
    # weights came out 0.87 GiB light.
    quant = {**OSS["quantization_config"], "modules_to_not_convert": value}
    path = _oss(tmp_path, quantization_config=quant)
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == (
        f"{path}: quantization_config.modules_to_not_convert: got {value!r}, expected a list "
        "of module names (strings, e.g. ['model.layers.*.self_attn', 'lm_head']) or null")


@pytest.mark.parametrize("key", ["exclude_modules", "ignore"])
def test_modelopt_and_compressed_tensors_lists_are_checked_too(key: str) -> None:
    from sim.cost.hfquant import unquantised_attention

    with pytest.raises(ServesimError, match=re.escape(
            f"c.json: quantization_config.{key}: got 'lm_head', expected a list")):
        unquantised_attention({"quant_method": "modelopt", key: "lm_head"}, "c.json")


@pytest.mark.parametrize("value", [None, [], "missing"])
def test_mxfp4_keeps_attention_16_bit_whatever_its_list(tmp_path: Path, value: Any) -> None:
    # vLLM's mxfp4 quantises the fused-MoE experts alone (HF's loader too): an empty or
    # missing list, or null, leaves attention bf16, as the released list does.
    quant = dict(OSS["quantization_config"])
    if value == "missing":
        del quant["modules_to_not_convert"]
    else:
        quant["modules_to_not_convert"] = value
    released = from_hf_config(_oss(tmp_path))
    spec = from_hf_config(_oss(tmp_path, quantization_config=quant))
    assert (spec.dtype, spec.expert_dtype) == ("bf16", "mxfp4")
    assert spec == released


# --- RoPE, head_dim, GPTQ bits -------------------------------------------------------

@pytest.mark.parametrize("rope", ["str", -1, [1], True, {}, {"factor": 4.0}])
def test_a_rope_scaling_that_is_no_typed_mapping_is_refused(tmp_path: Path, rope: Any) -> None:
    path = _oss(tmp_path, rope_scaling=rope)
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == (
        f"{path}: rope_scaling: got {rope!r}, expected a mapping that names its rope_type "
        "(e.g. {'rope_type': 'yarn', 'factor': 4.0, 'original_max_position_embeddings': "
        "32768}) or null")


def test_rope_parameters_are_checked_as_rope_scaling_is(tmp_path: Path) -> None:
    path = _config(tmp_path, {**LLAMA, "rope_parameters": "yarn"})
    with pytest.raises(ServesimError, match=re.escape("rope_parameters: got 'yarn', expected "
                                                      "a mapping")):
        from_hf_config(path)


@pytest.mark.parametrize("name", ["rope_type", "type"])
def test_an_unknown_rope_type_is_refused(tmp_path: Path, name: str) -> None:
    # Its factor had been applied: 8192 x 4 positions for a type nobody defines.
    path = _config(tmp_path, {**LLAMA, "rope_scaling": {name: "foo", "factor": 4.0}})
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == (
        f"{path}: rope_scaling.{name}: got 'foo'; known rope types: default, linear, "
        "dynamic, yarn, longrope, su, llama3")


def test_rope_scaling_null_is_no_scaling(tmp_path: Path) -> None:
    spec = from_hf_config(_config(tmp_path, {**LLAMA, "rope_scaling": None}))
    assert spec.max_context == 8192


def test_gpt_oss_without_head_dim_takes_hfs_default(tmp_path: Path) -> None:
    # GptOssConfig's head_dim defaults to 64; hidden / heads (2880 / 64) gave 45.
    assert from_hf_config(_oss(tmp_path, head_dim=None)).head_dim == 64
    # null is what HF reads as hidden / heads.
    cfg = {**OSS, "head_dim": None}
    assert from_hf_config(_config(tmp_path, cfg)).head_dim == 45


def test_gptq_without_bits_is_refused() -> None:
    with pytest.raises(ServesimError) as err:
        weights_dtype({"quant_method": "gptq", "group_size": 128}, "config.json")
    assert str(err.value) == ("config.json: quantization_config.bits: gptq without bits; "
                              "give the weights' width (servesim models bits: 4)")
    # HF's AwqConfig defaults to 4 bits.
    assert weights_dtype({"quant_method": "awq"}, "config.json") == "int4"


# --- wrappers ------------------------------------------------------------------------

def test_an_empty_text_config_names_its_model_type(tmp_path: Path) -> None:
    path = _config(tmp_path, {"model_type": "qwen3_5", "text_config": {}})
    with pytest.raises(ServesimError, match=re.escape(
            f"{path}: text_config.model_type: unsupported model_type None; supported: ")):
        from_hf_config(path)


# --- silicon CSV ---------------------------------------------------------------------

def test_silicon_text_cells_are_stripped_as_number_cells_are(tmp_path: Path) -> None:
    # ' vllm ' and a model name with a trailing space had been skipped ("model
    # nvidia/Llama-3.1-8B-Instruct-FP8  has no preset"), the space not shown.
    row = read_rows(silicon_csv(tmp_path, [
        "r1,, vllm , 0.12.0 ,nvidia/Llama-3.1-8B-Instruct-FP8 , h200_sxm ,fp8, agg ,"
        "1000,100,2,1,1,,71.91,11.25"]))[0]
    assert (row.backend, row.version, row.model_path, row.system, row.mode) == (
        "vllm", "0.12.0", "nvidia/Llama-3.1-8B-Instruct-FP8", "h200_sxm", "agg")
    case = classify(row)
    assert isinstance(case, Case) and (case.model, case.framework) == ("llama-3.1-8b", "vllm")


@needs_tables
def test_a_tp_size_the_model_cannot_split_over_names_the_column(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    csv = silicon_csv(tmp_path, ["r1,,vllm,0.12.0,nvidia/Llama-3.1-8B-Instruct-FP8,h200_sxm,"
                                 "fp8,agg,1000,100,2,3,1,,71.91,11.25"])
    assert main(["validate", "--silicon", str(csv), "--out", str(tmp_path / "o")]) == 2
    assert one_line(capsys) == (
        f"servesim: error: {csv}: line 2, tp_size: cannot simulate the row: the model's 32 "
        "query heads do not split over tp=3 (tp must divide the heads)")


@pytest.mark.parametrize("tp, moe_tp", [("0", "4"), ("0", "0"), ("4", "2")])
def test_a_moe_row_with_tp_0_is_incomplete_not_an_expert_split(tmp_path: Path, tp: str,
                                                              moe_tp: str) -> None:
    """validation.md: a row with 0 for tp is kept out as incomplete. A MiniMax-M2.5 row
    had been reported as an expert split servesim does not model (tp 0, expert tp 4),
    the expert-split check running first. A real odd split keeps its own reason."""
    row = read_rows(silicon_csv(tmp_path, [
        "r1,,vllm,0.16.0,MiniMaxAI/MiniMax-M2.5,h200_sxm,fp8,agg,128,16,2,"
        f"{tp},1,1,89.85,12.38,fp8,{moe_tp},1"],
        extra=("gemm_quant_mode", "moe_tp_size", "moe_ep_size")))[0]
    why = classify(row)
    if tp == "0":
        assert why == "incomplete row (lengths, concurrency, tp or latencies missing)"
    else:
        assert why == ("experts split other than by tensor parallelism or by expert "
                       "parallelism over the tp GPUs (tp 4, expert tp 2, expert parallelism 1)")
