"""vLLM's ``--hf-overrides`` (``model.hf_overrides``): changes to a model's config.json,
applied as vLLM applies them, before servesim reads the model from it."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sim.config.scenario import from_dict
from sim.cost.hfoverrides import apply_overrides
from sim.cost.presets import MODELS
from sim.errors import ServesimError

WORKLOAD = {"arrivals": {"process": "constant", "rate": 1.0}, "num_requests": 4,
            "lengths": {"prompt": {"dist": "fixed", "value": 64},
                        "output": {"dist": "fixed", "value": 8}}}
YARN = {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 32768}


def model_of(model: Any, vllm: dict[str, Any] | None = None, tp: int = 1):
    raw: dict[str, Any] = {"model": model, "workload": WORKLOAD,
                           "hardware": {"gpu": "h200", "tp": tp}}
    if vllm is not None:
        raw["vllm"] = vllm
    return from_dict(raw, "<test>").model


def same_but(a: Any, b: Any, *fields: str) -> bool:
    """Whether models ``a`` and ``b`` agree on every field but ``fields``."""
    return all(getattr(a, f.name) == getattr(b, f.name) for f in dataclasses.fields(a)
               if f.name not in fields)


def test_yarn_stretches_a_presets_context_as_vllm_derives_it() -> None:
    """Qwen's long-context recipe: YaRN by 4 over 32,768 positions is vLLM's derived
    max_model_len of 131,072 (original positions times the factor), which the flag's own
    max-model-len may then take; without the override it is refused (40,960 positions)."""
    flags = {"hf-overrides": json.dumps({"rope_scaling": YARN}), "max-model-len": 131072}
    model = model_of("qwen3-32b", flags)
    assert model.max_context == 131072
    assert same_but(model, MODELS["qwen3-32b"], "max_context")
    # Left to the derived length, as vLLM's max_model_len is without the flag.
    assert model_of("qwen3-32b", {"hf-overrides": {"rope_scaling": YARN}}).max_context == 131072
    # Other schemes stretch the checkpoint's own positions: 40,960 x 2.
    linear = {"rope_scaling": {"rope_type": "linear", "factor": 2}}
    assert model_of("qwen3-32b", {"hf-overrides": linear}).max_context == 81920
    with pytest.raises(ServesimError, match=r"model\.max_context: 131,072 tokens is more than "
                       r"the 40,960 positions"):
        model_of("qwen3-32b", {"max-model-len": 131072})
    # max_position_embeddings itself, and rope_theta, which prices nothing but is kept.
    model = model_of({"preset": "tiny", "hf_overrides": {"max_position_embeddings": 1024,
                                                         "rope_theta": 5e5}})
    assert (model.max_context, model.rope_theta) == (1024, 5e5)


def test_a_shipped_config_takes_any_override_and_keeps_the_presets_name() -> None:
    """DeepSeek-V3's config.json ships with servesim: an override of its depth is read
    from it (vLLM would build 30 layers), the rest as the preset has it."""
    model = model_of({"preset": "deepseek-v3", "hf_overrides": {"num_hidden_layers": 30}},
                     tp=8)
    assert model.layers == 30 and MODELS["deepseek-v3"].layers == 61
    assert same_but(model, MODELS["deepseek-v3"], "layers")


def test_a_nested_config_is_merged_into_not_replaced() -> None:
    """Qwen3.5's language model is its text_config: overriding one key of it keeps the
    others (replaced whole, the text config would lose its layers and heads)."""
    over = {"text_config": {"max_position_embeddings": 131072}}
    model = model_of({"preset": "qwen3.5-27b", "hf_overrides": over})
    assert model.max_context == 131072 and MODELS["qwen3.5-27b"].max_context == 262144
    assert same_but(model, MODELS["qwen3.5-27b"], "max_context")


def test_top_level_mappings_are_replaced_whole_and_nested_ones_merged() -> None:
    cfg = {"rope_scaling": YARN, "quantization_config": {"quant_method": "fp8", "bits": 8},
           "text_config": {"a": 1, "rope": {"x": 1, "y": 2}}}
    out = apply_overrides(cfg, {"rope_scaling": {"factor": 2},
                                "quantization_config": {"quant_method": "awq"},
                                "text_config": {"rope": {"y": 3}, "b": 2}})
    assert out["rope_scaling"] == {"factor": 2}
    assert out["quantization_config"] == {"quant_method": "awq"}
    assert out["text_config"] == {"a": 1, "b": 2, "rope": {"x": 1, "y": 3}}
    assert cfg["text_config"] == {"a": 1, "rope": {"x": 1, "y": 2}}  # not changed in place


def _llama_config(tmp_path: Path) -> Path:
    cfg = {"model_type": "llama", "num_hidden_layers": 2, "hidden_size": 256,
           "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 512,
           "vocab_size": 1000, "max_position_embeddings": 2048}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    return path


def test_overrides_apply_to_a_config_file_too(tmp_path: Path) -> None:
    path = _llama_config(tmp_path)
    model = model_of({"hf_config": str(path)},
                     {"hf-overrides": {"max_position_embeddings": 8192,
                                       "num_hidden_layers": 4}})
    assert (model.max_context, model.layers) == (8192, 4)
    with pytest.raises(ServesimError, match=r"model\.hf_overrides: .*config\.json with "
                       r"hf_overrides: num_attention_heads: got 0, expected a whole number"):
        model_of({"hf_config": str(path), "hf_overrides": {"num_attention_heads": 0}})


@pytest.mark.parametrize("model, match", [
    ({"preset": "llama-3-8b", "hf_overrides": {"hidden_size": 2048}},
     r"model\.hf_overrides\.hidden_size: 'hidden_size' would change preset llama-3-8b's "
     r"config beyond its context.*model\.hf_config"),
    ({"preset": "tiny", "hf_overrides": {"rope_scaling": {"rope_type": "yarn", "factor": 0}}},
     r"model\.hf_overrides\.rope_scaling\.factor: got 0, expected a number above 0"),
    ({"preset": "tiny", "hf_overrides": {"max_position_embeddings": "4k"}},
     r"model\.hf_overrides\.max_position_embeddings: got '4k', expected a whole number"),
    ({"preset": "tiny", "hf_overrides": "rope_theta=1e6"},
     r"model\.hf_overrides: got 'rope_theta=1e6', expected a mapping of config\.json keys"),
    ({"layers": 2, "hidden": 64, "heads": 2, "kv_heads": 2, "head_dim": 32,
      "intermediate": 128, "vocab": 100, "max_context": 512,
      "hf_overrides": {"rope_theta": 1e6}},
     r"model\.hf_overrides: changes a model's config\.json: give it with model\.preset"),
])
def test_bad_overrides_name_the_key(model: dict[str, Any], match: str) -> None:
    with pytest.raises(ServesimError, match=match):
        model_of(model)


def test_older_rope_flags_are_overrides_too() -> None:
    """vLLM up to 0.10 took --rope-scaling and --rope-theta and added them to the
    config overrides; a key given by two of the flags is refused."""
    model = model_of("qwen3-32b", {"rope-scaling": json.dumps(YARN), "rope_theta": 2e6,
                                   "max-model-len": "128K"})
    assert (model.max_context, model.rope_theta) == (131072, 2e6)
    model = model_of("qwen3-32b", {"hf-overrides": {"max_position_embeddings": 32768},
                                   "rope-scaling": YARN})
    assert model.max_context == 131072
    with pytest.raises(ServesimError, match=r"vllm\.rope-scaling: sets config key "
                       r"'rope_scaling', which another of hf-overrides, rope-scaling sets"):
        model_of("qwen3-32b", {"hf-overrides": {"rope_scaling": YARN}, "rope-scaling": YARN})
    # Null is each flag's default, vLLM's config files write it: no override.
    assert model_of("qwen3-32b", {"hf-overrides": None, "rope-scaling": None}) \
        == MODELS["qwen3-32b"]
    with pytest.raises(ServesimError, match=r"vllm\.rope-theta: sets model\.hf_overrides, "
                       r"which the scenario sets too"):
        model_of({"preset": "qwen3-32b", "hf_overrides": {}}, {"rope-theta": 1e6})


def test_a_misspelt_model_key_lists_the_source_keys_too() -> None:
    with pytest.raises(ServesimError, match=r"model\.hf_overide: unknown key 'hf_overide'; "
                       r"allowed: .*hf_config, hf_overrides, .*preset, "):
        model_of({"preset": "tiny", "hf_overide": {"rope_theta": 1e6}})


def test_preset_override_without_rope_factor_is_refused() -> None:
    """The preset path reads the overridden rope mapping with the same rule."""
    with pytest.raises(ServesimError, match=r"model\.hf_overrides\.rope_scaling\.factor: "
                       r"absent or null; a yarn rope type needs a factor"):
        model_of({"preset": "tiny", "hf_overrides": {"rope_scaling": {"rope_type": "yarn"}}})


@pytest.mark.parametrize("model, match", [
    # A wrapper's language model reads text_config: a top-level key would change nothing.
    ({"preset": "qwen3.5-27b", "hf_overrides": {"rope_theta": "abc"}},
     r"model\.hf_overrides: .*qwen3\.5-27b/config\.json with hf_overrides: rope_theta: a "
     r"qwen3_5 config takes its language model's keys from text_config, so this "
     r"top-level key would change nothing: give it as text_config\.rope_theta"),
    # And a plain config has no text_config to merge into.
    ({"preset": "deepseek-v3", "hf_overrides": {"text_config": {"num_hidden_layers": 2}}},
     r"text_config: this config keeps its keys at the top level, with no text_config"),
    # Two quantisations for one wrapper: which one is meant is not said.
    ({"preset": "qwen3.5-27b", "hf_overrides": {
        "quantization_config": {"quant_method": "fp8"},
        "text_config": {"quantization_config": {"quant_method": "modelopt",
                                                "quant_algo": "NVFP4"}}}},
     r"text_config\.quantization_config: a quantization_config at the top level and "
     r"another in text_config"),
])
def test_overrides_at_a_level_the_model_is_not_read_from_are_refused(
        model: dict[str, Any], match: str) -> None:
    with pytest.raises(ServesimError, match=match):
        model_of(model)


def test_two_rope_names_that_differ_are_refused_and_compression_config_is_read(
        tmp_path: Path) -> None:
    both = {"rope_scaling": YARN, "rope_parameters": {"rope_type": "linear", "factor": 100}}
    with pytest.raises(ServesimError, match=r"model\.hf_overrides\.rope_scaling: given beside "
                       r"a different rope_parameters"):
        model_of({"preset": "llama-3-8b", "hf_overrides": both})
    # compressed-tensors' older key stands for quantization_config where that is absent, as
    # vLLM reads it: FP8 weights, not bf16.
    fp8 = {"quant_method": "compressed-tensors", "format": "float-quantized",
           "config_groups": {"g": {"weights": {"num_bits": 8, "type": "float"},
                                   "targets": ["Linear"]}}}
    path = _llama_config(tmp_path)
    quantised = model_of({"hf_config": str(path), "hf_overrides": {"quantization_config": fp8}})
    assert quantised.dtype.startswith("fp8")
    assert model_of({"hf_config": str(path),
                     "hf_overrides": {"compression_config": fp8}}).dtype == quantised.dtype


def test_a_dotted_set_into_a_json_text_flag_is_refused(tmp_path: Path) -> None:
    """--set vllm.hf-overrides.KEY on a flag given as JSON text had replaced the text with
    that key alone: the other overrides were dropped without a word."""
    from sim.config.scenario import load

    path = tmp_path / "s.yaml"
    path.write_text(json.dumps({"model": "qwen3-32b", "hardware": {"gpu": "h200"},
                                "workload": WORKLOAD,
                                "vllm": {"hf-overrides": json.dumps({"rope_scaling": YARN})}}))
    assert load(path).model.max_context == 131072
    with pytest.raises(ServesimError, match=r"vllm\.hf-overrides\.rope_theta: vllm\.hf-overrides "
                       r"is given as text .* give the whole value instead"):
        load(path, ["vllm.hf-overrides.rope_theta=7"])
