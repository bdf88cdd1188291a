"""calibrate.model and the architecture sources: the packed-batch decoder, presets, HF configs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from calibrate.arch import resolve_model
from calibrate.model import build_decoder, prepare, unfold_heads
from calibrate.sweeps import slotted
from sim.cost.hfconfig import from_hf_config
from sim.cost.presets import MODELS
from sim.cost.shard import shard
from sim.errors import ServesimError

CPU = torch.device("cpu")


def hidden(model, tokens: torch.Tensor, caches, entries) -> torch.Tensor:
    batch = prepare(entries, CPU)
    x = model.embed(tokens)
    for layer, cache in zip(model.layers, caches, strict=True):
        x = layer(x, cache, batch)
    return x


@pytest.mark.parametrize("name", ["tiny", "tiny-moe"])
@torch.inference_mode()
def test_chunked_prefill_and_mixed_decode_match_full_prefill(name: str) -> None:
    # A token's expert choice depends on its own hidden state only, so a mixture of
    # experts must give the same rows however its tokens are packed.
    model = build_decoder(shard(MODELS[name], 1), 2, 256, "fp32", CPU)
    toks = torch.randint(0, 2048, (3, 24))
    ref = hidden(model, toks.flatten(), model.caches(3, 32),
                 [(0, 24, 0), (1, 24, 0), (2, 24, 0)]).view(3, 24, -1)
    caches = model.caches(8, 32)
    # Step 1: prefill chunks of different lengths into slots 5, 3, 6.
    a = hidden(model, torch.cat([toks[0, :10], toks[1, :16], toks[2, :20]]), caches,
               [(5, 10, 0), (3, 16, 0), (6, 20, 0)])
    # Step 2: a second chunk mixed with decodes at different contexts (masked decode group).
    b = hidden(model, torch.cat([toks[0, 10:23], toks[1, 16:17], toks[2, 20:21]]), caches,
               [(5, 13, 10), (3, 1, 16), (6, 1, 20)])
    torch.testing.assert_close(a[:10], ref[0, :10], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(b[:13], ref[0, 10:23], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(b[13], ref[1, 16], atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(b[14], ref[2, 20], atol=1e-5, rtol=1e-4)


def test_folded_attention_output_unfolds_from_the_layout_cuda_kernels_return() -> None:
    # CUDA's flash kernels hand back [B, K, G*n, D] as a transposed view of a
    # [B, G*n, K, D] buffer; heads and rows must come back in the same logical order.
    b, kv, g, n, d = 3, 2, 4, 5, 8
    contiguous = torch.randn(b, kv, g * n, d)
    transposed = contiguous.transpose(1, 2).contiguous().transpose(1, 2)
    assert not transposed.is_contiguous()
    want = contiguous.view(b, kv * g, n, d)
    torch.testing.assert_close(unfold_heads(transposed, kv * g, n), want, rtol=0, atol=0)
    torch.testing.assert_close(unfold_heads(contiguous, kv * g, n), want, rtol=0, atol=0)


def test_decode_groups_bucket_by_context_and_use_views() -> None:
    batch = prepare([(0, 1, 100), (1, 1, 101), (2, 1, 1000), (7, 1, 5)], CPU)
    assert [g.length for g in batch.decodes] == [6, 102, 1001]
    assert isinstance(batch.decodes[1].slots, slice) and batch.decodes[1].mask is not None
    assert batch.decodes[0].mask is None


def test_a_bucket_over_scattered_slots_splits_into_runs_of_consecutive_slots() -> None:
    # One bucket of contexts (100-102) in slots 3, 1, 2 and 7: runs 1-3 and 7.
    batch = prepare([(3, 1, 100), (1, 1, 101), (2, 1, 102), (7, 1, 101)], CPU)
    assert [(g.slots.start, g.slots.stop) for g in batch.decodes] == [(1, 4), (7, 8)]
    # Rows follow the slots: slot 1 is row 1, slot 2 row 2, slot 3 row 0.
    assert batch.decodes[0].tokens.tolist() == [1, 2, 0]
    assert batch.decodes[0].length == 103 and batch.decodes[1].length == 102
    assert batch.decodes[0].mask is not None and batch.decodes[0].mask[:, 0, 0].sum(1).tolist() \
        == [102, 103, 101]
    assert batch.decodes[1].mask is None


def test_whole_steps_scatter_slots_the_same_way_every_time() -> None:
    entries = ((1, 569), (1, 645), (1, 983), (1, 1093))
    ordered, scattered = slotted(entries), slotted(entries, scatter=True)
    assert [s for s, _, _ in ordered] == [0, 1, 2, 3]
    assert sorted(s for s, _, _ in scattered) == [0, 1, 2, 3]
    assert scattered == slotted(entries, scatter=True)
    assert [(n, c) for _, n, c in scattered] == list(entries)
    assert len(prepare(ordered, CPU).decodes) == 2 and len(prepare(scattered, CPU).decodes) == 4


@torch.inference_mode()
def test_full_step_samples_one_token_per_entry() -> None:
    model = build_decoder(shard(MODELS["tiny"], 1), 2, 256, "fp32", CPU)
    batch = prepare([(0, 5, 0), (1, 1, 7)], CPU)
    out = model(torch.zeros(6, dtype=torch.long), model.caches(2, 16), batch)
    assert out.shape == (2,) and out.dtype == torch.long and int(out.max()) < 2048


def test_tensor_parallel_shard() -> None:
    d = shard(MODELS["llama-3-8b"], 4)
    assert (d.heads, d.kv_heads, d.intermediate, d.hidden) == (8, 2, 3584, 4096)
    assert shard(MODELS["llama-3-8b"], 16).kv_heads == 1  # KV heads replicated
    with pytest.raises(ServesimError, match="--tp: the model's 32 query heads"):
        shard(MODELS["llama-3-8b"], 3, where="--tp")


def write(tmp_path: Path, cfg: object) -> Path:
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg) if not isinstance(cfg, str) else cfg)
    return path


QWEN = {"model_type": "qwen2", "hidden_size": 3584, "num_attention_heads": 28,
        "num_key_value_heads": 4, "num_hidden_layers": 28, "intermediate_size": 18944,
        "vocab_size": 152064, "max_position_embeddings": 32768, "rope_theta": 1000000.0,
        "torch_dtype": "bfloat16"}


def test_hf_config_matches_preset(tmp_path: Path) -> None:
    spec = from_hf_config(write(tmp_path, QWEN))
    preset = MODELS["qwen2.5-7b"]
    for f in ("layers", "hidden", "heads", "kv_heads", "head_dim", "intermediate", "vocab",
              "qkv_bias", "rope_theta", "dtype"):
        assert getattr(spec, f) == getattr(preset, f), f


@pytest.mark.parametrize(("cfg", "match"), [
    ("{not json", "not valid JSON"),
    ({**QWEN, "model_type": "qwen2_moe", "num_experts": 8}, "mixture-of-experts"),
    ({**QWEN, "model_type": "gpt2"}, "model_type: unsupported model_type 'gpt2'"),
    ({k: v for k, v in QWEN.items() if k != "hidden_size"}, "hidden_size: required key"),
    ({**QWEN, "num_attention_heads": "many"}, "num_attention_heads: got 'many'"),
    ({**QWEN, "num_key_value_heads": 5}, "num_key_value_heads: got 5: num_attention_heads "
                                         r"\d+ is not a multiple of it"),
])
def test_bad_hf_config_is_one_clear_line(tmp_path: Path, cfg: object, match: str) -> None:
    path = write(tmp_path, cfg)
    with pytest.raises(ServesimError, match=match) as err:
        from_hf_config(path)
    assert str(path) in str(err.value)


def test_unknown_preset() -> None:
    with pytest.raises(ServesimError, match="unknown model preset 'llama-9'.*tiny"):
        resolve_model("llama-9", None)


def test_a_preset_and_a_config_at_once_are_refused(tmp_path: Path) -> None:
    """--hf-config had won and --model been dropped without a word."""
    with pytest.raises(ServesimError, match=r"--hf-config: got --model tiny as well: give "
                                            r"--model PRESET or --hf-config FILE, not both"):
        resolve_model("tiny", tmp_path / "config.json")


def test_a_model_too_large_for_the_hosts_memory_is_refused_before_it_is_built() -> None:
    """llama-3-70b in fp32 on a CPU had been built anyway: the host ran out of memory (a
    traceback from the allocator, or the kernel killing the process) long after the
    budget was spent. Its embedding and LM head alone are 4.2 GB each."""
    from calibrate.run import check_host_memory

    big = MODELS["llama-3-70b"]
    with pytest.raises(ServesimError, match=r"llama-3-70b in fp32 needs about 2[0-9]\.\d GiB "
                                            r"of host memory to calibrate on the CPU .* more "
                                            r"than 80% of the 22\.0 GiB available; calibrate "
                                            r"it on a GPU"):
        check_host_memory(big, 1, "fp32", 1, 3.6e9, 22.0 * 2**30)
    check_host_memory(big, 1, "fp32", 1, 3.6e9, 64.0 * 2**30)  # room enough
    check_host_memory(big, 1, "fp32", 1, 3.6e9, None)  # the host does not say
    check_host_memory(MODELS["tiny"], 1, "fp32", 2, 1e6, 1.0 * 2**30)
