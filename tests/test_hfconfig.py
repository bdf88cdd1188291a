"""HuggingFace config.json in the simulator: sim.cost.hfconfig and ``model: {hf_config: PATH}``."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from sim.config.scenario import load
from sim.cost.hfconfig import from_hf_config
from sim.cost.presets import MODELS
from sim.errors import ServesimError

# Qwen/Qwen3-32B's config.json (the keys servesim reads).
QWEN3 = {"model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 5120,
         "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128,
         "num_hidden_layers": 64, "intermediate_size": 25600, "vocab_size": 151936,
         "max_position_embeddings": 40960, "rope_theta": 1000000, "attention_bias": False,
         "tie_word_embeddings": False, "torch_dtype": "bfloat16"}


def write(folder: Path, cfg: dict[str, object]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_qwen3_matches_its_preset(tmp_path: Path) -> None:
    spec = from_hf_config(write(tmp_path, QWEN3))
    preset = MODELS["qwen3-32b"]
    for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
              "qkv_bias", "rope_theta", "dtype", "max_context", "tie_embeddings"):
        assert getattr(spec, f) == getattr(preset, f), f
    # The attention is wider than the residual stream: head_dim is read, not derived.
    assert spec.heads * spec.head_dim == 8192 > spec.hidden


def test_qwen3_moe_matches_its_preset_and_other_moe_layouts_are_named(tmp_path: Path) -> None:
    # Qwen3-30B-A3B's config.json (the keys that set its shape).
    cfg = {**QWEN3, "model_type": "qwen3_moe", "num_hidden_layers": 48, "hidden_size": 2048,
           "num_attention_heads": 32, "num_key_value_heads": 4, "intermediate_size": 6144,
           "num_experts": 128, "num_experts_per_tok": 8, "moe_intermediate_size": 768,
           "decoder_sparse_step": 1, "mlp_only_layers": []}
    spec = from_hf_config(write(tmp_path, cfg))
    preset = MODELS["qwen3-30b-a3b"]
    assert dataclasses.replace(spec, name=preset.name) == preset
    with pytest.raises(ServesimError, match=r"mlp_only_layers: got \[3\]: dense layers are "
                                            r"modelled only as the first ones"):
        from_hf_config(write(tmp_path, {**cfg, "mlp_only_layers": [3]}))
    with pytest.raises(ServesimError, match=r"mlp_only_layers: got \['a', 1\]: dense layers"):
        from_hf_config(write(tmp_path, {**cfg, "mlp_only_layers": ["a", 1]}))
    with pytest.raises(ServesimError, match="num_experts: mixture-of-experts layers in a qwen3 "
                                            "config are not modelled; MoE families: mixtral, "
                                            "qwen3_moe"):
        from_hf_config(write(tmp_path, {**QWEN3, "num_experts": 8}))
    with pytest.raises(ServesimError, match=r"unsupported model_type 'qwen2_moe' \(its "
                                            r"mixture-of-experts or attention layers are not "
                                            r"modelled yet\)"):
        from_hf_config(write(tmp_path, {**QWEN3, "model_type": "qwen2_moe",
                                        "num_experts": 60}))


def test_scenario_reads_hf_config_beside_it(tmp_path: Path) -> None:
    write(tmp_path / "models" / "qwen3", QWEN3)
    sc_path = tmp_path / "s.yaml"
    sc_path.write_text(
        "model: {hf_config: models/qwen3/config.json, dtype: fp8}\n"
        "hardware: {gpu: h200}\n"
        "workload: {arrivals: {process: poisson, rate: 1}, num_requests: 1,\n"
        "  lengths: {prompt: {dist: fixed, value: 8}, output: {dist: fixed, value: 2}}}\n")
    sc = load(sc_path)
    assert (sc.model.layers, sc.model.heads, sc.model.head_dim, sc.model.dtype) == (
        64, 64, 128, "fp8")
    sc_path.write_text(sc_path.read_text().replace("models/qwen3", "nowhere"))
    with pytest.raises(ServesimError, match="model.hf_config: .*nowhere.*cannot read"):
        load(sc_path)
    sc_path.write_text("model: {hf_config: models/qwen3/config.json, preset: tiny}\n"
                       "workload: {trace: {path: azure_2023_conv}}\n")
    with pytest.raises(ServesimError, match="model.hf_config: give preset or hf_config"):
        load(sc_path)


@pytest.mark.parametrize(("change", "where", "says"), [
    ({"head_dim": "x"}, "head_dim", "got 'x', expected a number"),
    ({"hidden_size": 5120.5}, "hidden_size", "got 5120.5, expected a whole number"),
    ({"num_hidden_layers": -3}, "num_hidden_layers", "got -3, expected a whole number of at "
                                                     "least 1"),
    ({"vocab_size": 0}, "vocab_size", "got 0, expected a whole number of at least 1"),
    ({"num_hidden_layers": None}, "num_hidden_layers", "got null for a required number"),
])
def test_bad_dimensions_name_the_key(tmp_path: Path, change: dict, where: str,
                                     says: str) -> None:
    path = write(tmp_path, {**QWEN3, **change})
    with pytest.raises(ServesimError, match=f"config.json: {where}: {says}"):
        from_hf_config(path)


def test_null_reads_as_unset_where_huggingface_has_a_default(tmp_path: Path) -> None:
    # num_key_value_heads: null is num_attention_heads in HuggingFace's configs (as an
    # absent key is here); it had been refused as "required key is missing". rope_theta
    # null takes the absent key's 10000.
    spec = from_hf_config(write(tmp_path, {**QWEN3, "num_key_value_heads": None,
                                           "rope_theta": None}))
    assert (spec.kv_heads, spec.heads, spec.rope_theta) == (spec.heads, QWEN3[
        "num_attention_heads"], 10000.0)


def test_a_config_without_max_position_embeddings_is_refused_as_missing(
        tmp_path: Path) -> None:
    """It had been given 8192 positions without a word; HF's own defaults differ by
    family (Llama 2048, Qwen2 32768, Mistral 131072)."""
    cfg = {k: v for k, v in QWEN3.items() if k != "max_position_embeddings"}
    with pytest.raises(ServesimError, match="config.json: max_position_embeddings: required "
                                            "key is missing"):
        from_hf_config(write(tmp_path, cfg))


@pytest.mark.parametrize(("change", "message"), [
    ({"attention_bias": "false"}, r"attention_bias: got 'false', expected true or false"),
    ({"tie_word_embeddings": 0}, r"tie_word_embeddings: got 0, expected true or false"),
    ({"torch_dtype": "float8_e4m3fn"}, r"torch_dtype: got 'float8_e4m3fn'; read: bfloat16, "
                                       r"float16, float32 \(quantised weights are read from "
                                       r"quantization_config\)"),
    ({"torch_dtype": None, "dtype": ["bfloat16"]}, r"dtype: got \['bfloat16'\]; read: "),
])
def test_flags_and_dtypes_are_read_by_type_not_truthiness(tmp_path: Path, change: dict,
                                                          message: str) -> None:
    # "false" is a true string: read by truthiness it would add a bias nobody asked for.
    with pytest.raises(ServesimError, match=message):
        from_hf_config(write(tmp_path, {**QWEN3, **change}))
    assert from_hf_config(write(tmp_path, {**QWEN3, "attention_bias": False,
                                           "torch_dtype": "float16"})).dtype == "fp16"


def test_a_key_given_twice_is_named(tmp_path: Path) -> None:
    # json keeps the last of two; a config that says both cannot say which it means.
    path = tmp_path / "config.json"
    path.write_text('{"model_type": "qwen3", "hidden_size": 1, "hidden_size": 5120}')
    with pytest.raises(ServesimError, match=r"config\.json: hidden_size: given twice in one "
                                            r"object"):
        from_hf_config(path)


@pytest.mark.parametrize("rope, positions", [
    ({"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}, 131072),
    ({"type": "dynamic", "factor": 2.0}, 81920),
    ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8192}, 40960),
    ({"rope_type": "default"}, 40960),
    ({"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 32768.0}, 131072),
])
def test_rope_scaling_sets_the_context(tmp_path: Path, rope: dict[str, object],
                                       positions: int) -> None:
    """The context vLLM derives: a YaRN or dynamic factor stretches the positions (YaRN's
    from its original length); Llama 3's configs already give the stretched length."""
    assert from_hf_config(write(tmp_path, {**QWEN3, "rope_scaling": rope})).max_context == positions


def test_rope_scaling_factor_must_be_a_number(tmp_path: Path) -> None:
    with pytest.raises(ServesimError, match=r"rope_scaling\.factor: got '4'"):
        from_hf_config(write(tmp_path, {**QWEN3, "rope_scaling": {"type": "yarn", "factor": "4"}}))
    # transformers v5 writes the same under rope_parameters: the error names that key.
    with pytest.raises(ServesimError, match=r"rope_parameters\.factor: got '4'"):
        from_hf_config(write(tmp_path, {**QWEN3, "rope_parameters": {"rope_type": "yarn",
                                                                     "factor": "4"}}))


@pytest.mark.parametrize("rope, says", [
    # A stretch below 1 shrank the context (1e-9 left one token, blamed on max_context).
    ({"rope_type": "yarn", "factor": 1e-9, "original_max_position_embeddings": 4096},
     r"got 1e-09: a yarn factor stretches the trained context and must be at least 1"),
    ({"type": "linear", "factor": 0.5}, r"got 0\.5: a linear factor stretches"),
    # Llama 3's factor sets its frequencies: a string was never read.
    ({"rope_type": "llama3", "factor": "x", "original_max_position_embeddings": 8192},
     r"got 'x', expected a number above 0 and below 2\*\*20"),
])
def test_a_rope_factor_that_cannot_stretch_is_refused(tmp_path: Path, rope: dict[str, object],
                                                      says: str) -> None:
    with pytest.raises(ServesimError, match=rf"config\.json: rope_scaling\.factor: {says}"):
        from_hf_config(write(tmp_path, {**QWEN3, "rope_scaling": rope}))


@pytest.mark.parametrize("key, rope", [
    ("rope_scaling", {"rope_type": "yarn"}),
    ("rope_scaling", {"type": "linear", "factor": None}),
    ("rope_parameters", {"rope_type": "dynamic"}),
])
def test_rope_scaling_without_factor_is_refused(tmp_path: Path, key: str,
                                                rope: dict[str, object]) -> None:
    """A yarn, linear or dynamic mapping without its factor is refused, as transformers
    and vLLM refuse it, rather than read as unscaled."""
    kind = rope.get("rope_type", rope.get("type"))
    with pytest.raises(ServesimError, match=rf"config\.json: {key}\.factor: absent or null; "
                       rf"a {kind} rope type needs a factor, a number of at least 1"):
        from_hf_config(write(tmp_path, {**QWEN3, key: rope}))


def test_default_rope_without_factor_is_unscaled(tmp_path: Path) -> None:
    assert from_hf_config(write(tmp_path, {**QWEN3, "rope_scaling": {
        "rope_type": "default"}})).max_context == 40960


def test_a_count_of_2_to_the_53_is_refused_naming_the_config_key(tmp_path: Path) -> None:
    """The reader's bound is ModelSpec's (below 2**53): the file and its key are named, not
    the scenario's model.vocab."""
    path = write(tmp_path, {**QWEN3, "vocab_size": 2**53})
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == (f"{path}: vocab_size: got 9007199254740992, expected a whole "
                              "number of at least 1 and below 2**53")
    assert from_hf_config(write(tmp_path, {**QWEN3, "vocab_size": 2**53 - 1})).vocab == 2**53 - 1


@pytest.mark.parametrize("kv", [5, 128])
def test_kv_heads_that_do_not_divide_the_heads_are_named_by_the_files_key(
        tmp_path: Path, kv: int) -> None:
    """The error names num_key_value_heads, the key the user edits, not the model
    spec's kv_heads field."""
    path = write(tmp_path, {**QWEN3, "num_key_value_heads": kv})
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == (f"{path}: num_key_value_heads: got {kv}: num_attention_heads "
                              f"{QWEN3['num_attention_heads']} is not a multiple of it (each "
                              "KV head serves an equal group of query heads)")


def test_a_whole_number_of_more_than_100_digits_is_bad_json(tmp_path: Path) -> None:
    """Unused keys too: Python refuses to read a 5,000-digit integer with an error that
    names no place, and a 400-digit one does not convert to a float."""
    for key, digits in (("num_hidden_layers", 400), ("unused_key", 5000)):
        path = write(tmp_path, QWEN3)
        path.write_text(path.read_text()[:-1] + f', "{key}": {"7" * digits}}}')
        with pytest.raises(ServesimError, match=rf"config.json: not valid JSON: a whole "
                                                rf"number of {digits:,} digits; no value "
                                                r"servesim reads needs more than 100"):
            from_hf_config(path)


@pytest.mark.parametrize(("quant", "where", "got"), [
    ({"kv_cache_quant_algo": "NVFP4"}, "kv_cache_quant_algo", "'NVFP4'"),
    ({"kv_cache_quant_algo": "int8"}, "kv_cache_quant_algo", "'int8'"),
    ({"kv_cache_scheme": {"type": "int", "num_bits": 8}}, "kv_cache_scheme",
     "\"{'type': 'int', 'num_bits': 8}\""),
])
def test_a_kv_cache_other_than_fp8_is_refused(tmp_path: Path, quant: dict[str, object],
                                              where: str, got: str) -> None:
    """A checkpoint's calibrated KV cache is FP8 or none: any other had been priced as a
    16-bit cache without a word."""
    base = {"quant_method": "modelopt", "quant_algo": "FP8"}
    ok = from_hf_config(write(tmp_path, {**QWEN3, "quantization_config": {
        **base, "kv_cache_quant_algo": "FP8"}}))
    assert ok.kv_dtype == "fp8"
    plain = from_hf_config(write(tmp_path, {**QWEN3, "quantization_config": {
        **base, "kv_cache_quant_algo": None}}))
    assert plain.kv_dtype != "fp8"
    with pytest.raises(ServesimError, match=rf"quantization_config\.{where}: got {got}; "
                                            r"servesim models a checkpoint's FP8 KV cache"):
        from_hf_config(write(tmp_path, {**QWEN3, "quantization_config": {**base, **quant}}))


@pytest.mark.parametrize(("model", "edit", "says"), [
    # Each had named the model spec's field (dense_layers, linear_value_heads) or, for a
    # null routed width, the shared expert's key that was right.
    ("deepseek-v3", lambda c: c.update(first_k_dense_replace=61),
     "first_k_dense_replace: got 61, must be below layers (61)"),
    ("qwen3.5-27b", lambda c: c["text_config"].update(linear_num_value_heads=47),
     "text_config.linear_num_value_heads: linear_num_value_heads=47 is not a multiple of "
     "linear_num_key_heads=16"),
    ("qwen3.5-35b-a3b", lambda c: c["text_config"].update(moe_intermediate_size=None),
     "text_config.moe_intermediate_size: got null for a required number"),
])
def test_an_error_names_the_config_key_not_the_model_field(tmp_path: Path, model: str,
                                                           edit, says: str) -> None:
    import json

    shipped = Path(__file__).parent.parent / "sim" / "data" / "models" / model / "config.json"
    cfg = json.loads(shipped.read_text())
    edit(cfg)
    path = write(tmp_path, cfg)
    with pytest.raises(ServesimError) as err:
        from_hf_config(path)
    assert str(err.value) == f"{path}: {says}"


@pytest.mark.parametrize("value", ["", "  "])
def test_an_empty_hf_config_path_is_refused_as_empty(value: str) -> None:
    from sim.config.scenario import from_dict

    # It had been read as the scenario's folder: "<dir>: is a directory".
    with pytest.raises(ServesimError, match=rf"model\.hf_config: got {value!r}, expected a "
                                            "path to a config.json"):
        from_dict({"model": {"hf_config": value}, "workload": {"trace": {
            "path": "azure_2023_conv"}}}, "<test>")
