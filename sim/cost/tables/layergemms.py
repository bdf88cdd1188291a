"""The GEMMs one layer runs at a tensor-parallel rank, as (n, k) shapes of the
projections (attention's, latent attention's and its sparse indexer's, Gated DeltaNet's,
the dense SwiGLU), and the token mixer's projections priced from a GEMM table. The
measured-profile builder (:mod:`sim.cost.tables.profileparts`) and the roofline's fit to
the tables (:mod:`sim.cost.tables.rooflinefit`) share them.
"""

from __future__ import annotations

import numpy as np

from sim.cost.shard import Shard
from sim.cost.tables.gemmtable import GemmTable


def attention_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one layer's attention projections on one rank: fused QKV and the output;
    for latent attention the fused q_a/kv_a down-projection (whole on every rank), q_b
    (a plain query projection from the hidden state where there is no query latent),
    with sparse attention its indexer's, and the output (kv_b belongs to
    attention: :mod:`sim.cost.tables.mlaattn`)."""
    if rank.kv_lora_rank:
        q_width = rank.heads * (rank.qk_nope_head_dim + rank.qk_rope_head_dim)
        down = rank.q_lora_rank + rank.kv_lora_rank + rank.qk_rope_head_dim
        q = [(q_width, rank.q_lora_rank or rank.hidden)]
        # Sparse attention's indexer, whole on every rank: its key rides the fused
        # down-projection (as SGLang fuses it); its queries come from the query latent,
        # its heads' weights from the hidden state.
        index = [(rank.index_n_heads * rank.index_head_dim, rank.q_lora_rank),
                 (rank.index_n_heads, rank.hidden)] if rank.sparse else []
        return [(down + rank.index_head_dim * rank.sparse, rank.hidden), *q, *index,
                (rank.hidden, rank.heads * rank.v_head_dim)]
    queries = rank.heads * (2 if rank.attn_output_gate else 1)  # a gate per head too
    return [((queries + 2 * rank.kv_heads) * rank.head_dim, rank.hidden),
            (rank.hidden, rank.heads * rank.head_dim)]


def gdn_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one Gated DeltaNet layer's projections on one rank: in_proj_qkvz (its
    queries, keys, values and output gate), in_proj_ba (two scalars a value head) and
    out_proj; none without such layers."""
    if not rank.linear_layers:
        return []
    keys = rank.linear_key_heads * rank.linear_key_dim
    values = rank.linear_value_heads * rank.linear_value_dim
    return [(2 * keys + 2 * values, rank.hidden), (2 * rank.linear_value_heads, rank.hidden),
            (rank.hidden, values)]


def mixer_times(rank: Shard, gemm: GemmTable, qkv_gemm: GemmTable | None = None) -> np.ndarray:
    """Seconds of a layer's token-mixer projections at ``gemm``'s token counts, the mean
    over the layers: attention's in the attention layers, Gated DeltaNet's in the others.
    ``qkv_gemm`` (None: ``gemm``) prices attention's query/key/value projections, all but
    its last GEMM, the output, where a checkpoint keeps them at a dtype of their own."""
    qkv_gemm = gemm if qkv_gemm is None else qkv_gemm
    *qkv, out = attention_gemms(rank)
    attn: np.ndarray = np.sum(
        [gemm.times(n, k) if qkv_gemm is gemm
         else np.array([qkv_gemm.at(float(x), n, k) for x in gemm.ms]) for n, k in qkv]
        + [gemm.times(*out)], axis=0)
    if not rank.linear_layers:
        return attn
    g = rank.linear_layers / rank.layers
    gdn: np.ndarray = np.sum([gemm.times(n, k) for n, k in gdn_gemms(rank)], axis=0)
    return (1 - g) * attn + g * gdn


def mlp_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one dense layer's SwiGLU on one rank: fused gate+up, down."""
    return [(2 * rank.intermediate, rank.hidden), (rank.hidden, rank.intermediate)]


def layer_gemms(rank: Shard) -> list[tuple[int, int]]:
    """(n, k) of one dense layer's projections on one rank (attention, then SwiGLU; a
    hybrid model's Gated DeltaNet projections after attention's)."""
    return attention_gemms(rank) + gdn_gemms(rank) + mlp_gemms(rank)
