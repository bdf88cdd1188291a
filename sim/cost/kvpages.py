"""How a KV pool's pages map to tokens, attention layers and linear-attention states.

A page holds ``block_size`` tokens of one group of layers. Dense models have one group;
vLLM's hybrid KV-cache manager groups sliding-window and full-attention layers (or Gated
DeltaNet and full-attention layers) so that one pool of equal pages serves them all, and
raises the block size of a model with linear layers until one attention page holds a
layer's recurrent state. These functions give those counts and sizes; the pool's size is
:func:`sim.cost.memory.memory_budget`'s, and who holds its pages
:class:`sim.core.kvmanager.KVCacheManager`'s.
"""

from __future__ import annotations

from sim.cost.shard import shard
from sim.cost.specs import ModelSpec


def blocks_for(tokens: int, block_size: int) -> int:
    """Blocks needed to hold ``tokens`` tokens (ceil division)."""
    return -(-tokens // block_size)


def window_share(window_blocks: int, window_groups: tuple[int, int], blocks: int) -> int:
    """Blocks (of the full-attention groups' pages) the sliding-window layers of a request
    whose full layers span ``blocks`` blocks hold: a page a sliding group for each block
    up to the window's ``window_blocks``, ``window_groups`` = (sliding groups, full
    groups) pages to a block, rounded up (:func:`hybrid_groups`)."""
    sliding, full = window_groups
    return -(-sliding * min(window_blocks, blocks) // full)


def hybrid_groups(full_layers: int, sliding_layers: int,
                  ratio: float = 1.5) -> tuple[int, int, int]:
    """(layers a group, full groups, sliding groups) of a model with both kinds of
    attention layer, as vLLM V1's hybrid KV-cache manager groups them.

    Every group holds the same number of layers, so one pool of equal pages serves
    them all; a page holds one group's KV of ``block_size`` tokens. The group size is
    the smaller layer count (the "1" of an n:1 pattern), or the larger when the two
    counts are less than ``ratio`` apart (:attr:`sim.cost.vllmmemory.MemoryRules.
    group_ratio`: 1.5 from vLLM 0.18, 1.25 from 0.12, never in 0.11), the last group of
    a kind padded with empty layers (kv_cache_utils, _get_kv_cache_groups_uniform_page_
    size). gpt-oss (18 + 18 layers, or 12 + 12): one group of each kind.

    A request's tokens then take, from the one pool, a page a block of tokens in each
    full group and, in each sliding group, only the pages its window covers: at most
    ceil(W / block_size) + 1, as SlidingWindowManager frees those that fall behind."""
    size = min(full_layers, sliding_layers)
    most = max(full_layers, sliding_layers)
    if most < ratio * size:
        size = most
    return size, -(-full_layers // size), -(-sliding_layers // size)


def state_block_size(model: ModelSpec, tp: int, align: int, spec_tokens: int = 0) -> int:
    """Tokens of a KV block of a model with Gated DeltaNet layers on ``tp`` GPUs under
    vLLM: the fewest, a multiple of ``align`` (the attention kernel's block multiple, 16,
    or a larger --block-size), whose page of one attention layer (block × the layer's KV
    bytes a token on one GPU) holds one linear layer's state (its recurrent matrices,
    fp32 unless the checkpoint says otherwise, and its convolution window). vLLM raises
    the block size so to give every layer one page size (its platform's hybrid block
    alignment; Qwen3.5-27B: 784 tokens at any tp, its state 3,207,168 bytes against
    4,096 a token on one GPU), and pads the state's page to the attention page. Under
    speculative decoding of ``spec_tokens`` tokens the convolution window keeps that many
    inputs more (vLLM's Gated DeltaNet state shape takes them), so the page may grow: 800
    tokens for Qwen3.5-27B drafting 2."""
    d = shard(model, tp)
    token = d.kv_bytes_per_token // d.attention_layers
    return align * -(-layer_state_bytes(model, tp, spec_tokens) // (align * token))


def layer_state_bytes(model: ModelSpec, tp: int, spec_tokens: int = 0) -> int:
    """One Gated DeltaNet layer's state of one sequence on one of ``tp`` GPUs (bytes), as
    vLLM shapes it: the recurrent matrices and the convolution window, which keeps
    ``spec_tokens`` more inputs under speculative decoding."""
    d = shard(model, tp)
    return d.linear_state_bytes // d.linear_layers + d.linear_conv_dim * spec_tokens * d.act_bytes
