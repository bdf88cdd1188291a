"""A checkpoint's ``quantization_config`` (HuggingFace ``config.json``), read as servesim's
weight dtype, the attention projections it leaves unquantised, and whether it ships an
FP8 KV cache: FP8 per tensor or in 128 x 128 blocks, compressed-tensors, ModelOpt and
gpt-oss's mxfp4 (:func:`sim.cost.hfconfig.from_hf_config` reads the rest)."""

from __future__ import annotations

from typing import Any

from sim.errors import ServesimError

# Each layout's complete set of query/key/value projections, by module name: a list that
# leaves one of these sets unquantised (and the output projection not) keeps them apart.
_QKV_SETS = (frozenset({"q_proj", "k_proj", "v_proj"}), frozenset({"qkv_proj"}),
             frozenset({"q_a_proj", "q_b_proj", "kv_a_proj_with_mqa", "kv_b_proj"}),
             frozenset({"q_proj", "kv_a_proj_with_mqa", "kv_b_proj"}))


# The keys that list modules a checkpoint leaves unquantised: HF's and gpt-oss's, ModelOpt's,
# compressed-tensors'.
SKIP_KEYS = ("modules_to_not_convert", "exclude_modules", "ignore")


def kept_modules(quant: dict[str, Any], src: str) -> list[str]:
    """The module names a ``quantization_config`` keeps unquantised: the first non-empty
    list of :data:`SKIP_KEYS`, or none. ``null`` is no list (HF writes an unset list as
    null); any other value that is not a list of names is refused, as a number or one
    bare name would otherwise match nothing and quantise attention unseen."""
    for key in SKIP_KEYS:
        value = quant.get(key)
        if value is not None and (not isinstance(value, list)
                                  or not all(isinstance(k, str) for k in value)):
            raise ServesimError(f"got {value!r}, expected a list of module names (strings, "
                                "e.g. ['model.layers.*.self_attn', 'lm_head']) or null",
                                source=src, where=f"quantization_config.{key}")
    return next((quant[k] for k in SKIP_KEYS if quant.get(k)), [])


def unquantised_attention(quant: Any, src: str) -> str:
    """What of attention a ``quantization_config`` leaves unquantised: ``"all"`` (mxfp4,
    whatever its ``modules_to_not_convert`` lists, as vLLM quantises only the experts;
    ModelOpt's experts-only exports, whose ``exclude_modules`` or ``ignore`` list each layer's
    ``self_attn*``), ``"qkv"`` (its query, key and value projections, by name, the output
    projection quantised: NVIDIA's NVFP4 DeepSeek checkpoints), or ``""`` (none). Any
    other subset of attention's projections is an error naming one of them. A list naming
    every projection one by one, the output's too, is ``"all"``."""
    if not isinstance(quant, dict):
        return ""
    keep = kept_modules(quant, src)
    if quant.get("quant_method") == "mxfp4":
        # vLLM's mxfp4 quantises fused-MoE experts alone and serves every linear layer
        # unquantised, listed or not (HF's loader swaps in only the experts too), so an
        # empty or missing list still leaves attention 16-bit.
        return "all"
    # A sparse-attention indexer's small projections (DeepSeek-V3.2's and GLM-5's
    # indexer*, weights_proj named indexers_proj) are kept 16-bit whatever the rest is:
    # they say nothing of the attention projections.
    attention = [k for k in keep if "self_attn" in k
                 and "indexer" not in k.partition("self_attn")[2]]
    whole = [k for k in attention if k.partition("self_attn")[2] in ("", "*", ".*")]
    if whole:
        return "all"
    names = {k.rpartition(".")[2] for k in attention}
    projections = {n for n in names if n.endswith("_proj") or n.endswith("_with_mqa")}
    if not projections:
        return ""  # norms only (GLM-5's FP8 release lists its latents' norms)
    if any(projections == qkv | {"o_proj"} for qkv in _QKV_SETS):
        return "all"  # every projection by name (NVIDIA's NVFP4 GLM-5)
    if not any(projections == qkv for qkv in _QKV_SETS):
        raise ServesimError(f"keeps {attention[0]!r} and other single attention projections "
                            "unquantised, the rest at its dtype; servesim models attention "
                            "unquantised whole, or its query/key/value projections "
                            f"({'; '.join(', '.join(sorted(q)) for q in _QKV_SETS)}) "
                            "apart from the output", source=src, where="quantization_config")
    return "qkv"


def checkpoint_fp8_kv(quant: Any, src: str = "") -> bool:
    """Whether a ``quantization_config`` calibrates an FP8 KV cache: ModelOpt's
    ``kv_cache_quant_algo: FP8``, or an 8-bit float ``kv_cache_scheme`` (compressed-tensors,
    and ModelOpt exports in its layout). vLLM's ``--kv-cache-dtype auto`` takes the
    checkpoint's FP8 cache since vllm-project/vllm PR 29980 (December 2025); before, auto
    meant the activations' dtype. Any other cache a checkpoint names (an NVFP4 or int8
    one) is an error naming the key, where it would otherwise be priced as 16-bit unsaid."""
    if not isinstance(quant, dict):
        return False
    where = "quantization_config"
    algo = quant.get("kv_cache_quant_algo")
    if algo is not None and str(algo).upper() not in ("FP8", "", "NONE"):
        raise ServesimError(f"got {algo!r}; servesim models a checkpoint's FP8 KV cache "
                            "(FP8) or none (null)", source=src,
                            where=f"{where}.kv_cache_quant_algo")
    if str(algo or "").upper() == "FP8":
        return True
    scheme = quant.get("kv_cache_scheme")
    if scheme is None:
        return False
    if isinstance(scheme, dict) and scheme.get("type") == "float" and \
            scheme.get("num_bits") == 8:
        return True
    raise ServesimError(f"got {str(scheme)[:80]!r}; servesim models a checkpoint's FP8 KV "
                        "cache ({'type': 'float', 'num_bits': 8}) or none (null)",
                        source=src, where=f"{where}.kv_cache_scheme")


def weights_dtype(quant: Any, src: str) -> str | None:
    """The weights' dtype a ``quantization_config`` gives (None when there is none); a
    quantisation servesim does not model is an error naming its method."""
    if quant is None:
        return None
    where = "quantization_config"
    if not isinstance(quant, dict):
        raise ServesimError(f"got {quant!r}, expected a mapping", source=src, where=where)
    method = quant.get("quant_method")
    if method == "fp8":
        block = quant.get("weight_block_size")
        if block is None or block == []:
            return "fp8"
        if block != [128, 128]:
            # The kernel tables time block-scaled FP8 at DeepSeek's and Qwen's 128 x 128.
            raise ServesimError(f"got {block!r}; servesim prices block-scaled FP8 with "
                                "blocks of [128, 128]", source=src,
                                where=f"{where}.weight_block_size")
        return "fp8-block"
    algo = str(quant.get("quant_algo", "")).upper()
    if method == "modelopt" and algo in ("FP8", "NVFP4"):
        return algo.lower()
    if method == "mxfp4":
        return "mxfp4"
    if method == "gptq" and "bits" not in quant:
        # HF's GPTQConfig has no default width and vLLM requires the key: 4 is a guess.
        raise ServesimError("gptq without bits; give the weights' width (servesim models "
                            "bits: 4)", source=src, where=f"{where}.bits")
    # HF's AwqConfig takes 4 bits when none are given.
    if method in ("awq", "gptq") and quant.get("bits", 4) == 4:
        return "int4"
    if method == "compressed-tensors":
        found = _compressed_tensors_dtype(quant)
        if found:
            return found
    what = f"{method!r}" + (f" ({quant.get('quant_algo')})" if "quant_algo" in quant else "") \
        + (f" with bits {quant['bits']!r}" if "bits" in quant else "")
    raise ServesimError(f"quantisation {what} is not modelled; servesim models FP8 weights "
                        "(quant_method fp8, compressed-tensors float8, modelopt FP8), 4-bit "
                        "ones (mxfp4, modelopt NVFP4, compressed-tensors nvfp4 or int4, "
                        "4-bit awq and gptq)", source=src, where=f"{where}.quant_method")


def _compressed_tensors_dtype(quant: dict[str, Any]) -> str | None:
    """The weights' dtype of a compressed-tensors config whose every group agrees: FP8
    (per block or not), NVFP4 (4-bit floats, groups of 16) or int4 (4-bit integers)."""
    groups = quant.get("config_groups")
    weights = [g.get("weights") for g in groups.values()
               if isinstance(g, dict)] if isinstance(groups, dict) else []
    dicts = [w for w in weights if isinstance(w, dict)]
    if not dicts or len(dicts) != len(weights):
        return None
    # A malformed entry (a list, say) stands as its repr: hashable, and it matches no kind.
    kinds = {tuple(v if isinstance(v, str | int | float | None) else repr(v)
                   for v in (w.get("type"), w.get("num_bits"))) for w in dicts}
    if kinds == {("float", 8)}:
        return "fp8-block" if any(w.get("strategy") == "block" for w in dicts) else "fp8"
    if kinds == {("float", 4)}:
        return "nvfp4"
    if kinds == {("int", 4)}:
        return "int4"
    return None
