"""A Llama-family decoder in plain torch, with random weights, for timing.

Layers: RMSNorm → fused QKV projection → rotary embedding → grouped-query attention
(``scaled_dot_product_attention``) → output projection → RMSNorm → SwiGLU MLP, with
residuals; then a final RMSNorm, the LM head and sampling. A mixture-of-experts model's
layers past its first ``dense_layers`` replace the SwiGLU MLP with :class:`MoE`: a router,
top-k experts per token (each a SwiGLU) and any shared experts.

Every forward runs over a *packed batch*: the new tokens of all entries concatenated
(T = Σ new_tokens), each entry being (slot, new_tokens, context_before) in a
preallocated per-slot KV cache. Prefill chunks and decodes therefore mix freely in
one step, which is what a continuous-batching server does. A layer exposes its three
stages (``project``, ``attend``, ``finish``) so calibration can time them apart.

Notation in shape comments: T packed tokens, H query heads, K KV heads, D head dim,
S cache slots, C cache capacity in tokens, B entries in a group, E routed experts,
k experts per token, I an expert's width (this GPU's share of it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import nn

from sim.cost.shard import Shard

# A decode group is padded to its longest context; start a new group once the longest
# would exceed the shortest by this factor, bounding wasted KV reads to ~25%.
DECODE_BUCKET_RATIO = 1.25


def spread_ids(n: int, vocab: int, start: int = 0) -> list[int]:
    """``n`` token ids spread over a vocabulary of ``vocab`` (a fixed odd stride from
    ``start``), for timing a step.

    A packed batch of one repeated id gives every token the same hidden state in every
    layer, so a mixture of experts would send them all to the same k experts; a real
    prompt's tokens route apart. Under random weights distinct ids route about as
    independently as random inputs, which is what the sweep's operators see.
    """
    return [(start + 40503 * i) % vocab for i in range(n)]


class RMSNorm(nn.Module):
    """x / rms(x) · weight, computed in fp32 for stability."""

    def __init__(self, dim: int, eps: float = 1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x32 = x.float()
        x32 = x32 * torch.rsqrt(x32.pow(2).mean(-1, keepdim=True) + self.eps)
        return (x32 * self.weight.float()).to(x.dtype)


class Rotary(nn.Module):
    """Rotary position embedding (rotate-half convention) with a precomputed table."""

    def __init__(self, head_dim: int, max_pos: int, theta: float):
        super().__init__()
        inv = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim)
        ang = torch.outer(torch.arange(max_pos, dtype=torch.float32), inv)  # [C, D/2]
        self.cos: torch.Tensor
        self.sin: torch.Tensor
        self.register_buffer("cos", ang.cos(), persistent=False)
        self.register_buffer("sin", ang.sin(), persistent=False)

    def forward(self, x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        # x [T, heads, D], pos [T]
        cos = self.cos[pos].unsqueeze(1).to(x.dtype)  # [T, 1, D/2]
        sin = self.sin[pos].unsqueeze(1).to(x.dtype)
        a, b = x.chunk(2, dim=-1)
        return torch.cat((a * cos - b * sin, b * cos + a * sin), dim=-1)


class SwiGLU(nn.Module):
    """A dense SwiGLU MLP of ``width``: down(silu(gate(x)) · up(x)), x [T, hidden]."""

    def __init__(self, hidden: int, width: int):
        super().__init__()
        self.w_gate_up = nn.Linear(hidden, 2 * width, bias=False)
        self.w_down = nn.Linear(width, hidden, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] → [T, hidden]."""
        gate, up = self.w_gate_up(x).chunk(2, dim=-1)
        return self.w_down(F.silu(gate) * up)


class MoE(nn.Module):
    """A mixture of SwiGLU experts, as a plain torch server without fused MoE kernels
    would run it.

    The router scores every routed expert; each token goes to its ``experts_per_token``
    best, weighted by the softmax of their logits, which is Mixtral's rule and equals
    Qwen3-MoE's (softmax over all experts, top k renormalised to sum to one). Tokens are
    sorted by expert, each expert that received any runs its SwiGLU on exactly its
    tokens (gathered with ``index_select``), and the weighted outputs are scattered back
    with ``index_add_``: no expert computes a token it was not routed. Shared experts
    run on every token as one SwiGLU of ``shared_experts`` times the experts' width
    (the same function as their sum). Reading the per-expert counts synchronises a GPU
    once per layer, so this layer is timed eagerly, never replayed as a CUDA graph.
    """

    def __init__(self, d: Shard):
        super().__init__()
        self.k = d.experts_per_token
        self.router = nn.Linear(d.hidden, d.experts, bias=False)
        # Routed experts stacked: gate and up [E, 2I, hidden], down [E, hidden, I].
        self.w_gate_up = nn.Parameter(torch.empty(d.experts, 2 * d.expert_intermediate,
                                                  d.hidden))
        self.w_down = nn.Parameter(torch.empty(d.experts, d.hidden, d.expert_intermediate))
        self.shared = (SwiGLU(d.hidden, d.shared_experts * d.expert_intermediate)
                       if d.shared_experts else None)

    def route(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """x [T, hidden] → (expert ids [T, k], their weights [T, k] summing to one)."""
        logits = self.router(x).float()  # [T, E], scored in fp32 as servers do
        top, ids = torch.topk(logits, self.k, dim=-1)
        return ids, torch.softmax(top, dim=-1).to(x.dtype)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x [T, hidden] → [T, hidden]."""
        ids, weights = self.route(x)
        flat = ids.flatten()                          # [T·k] expert of each assignment
        order = torch.argsort(flat, stable=True)      # assignments grouped by expert
        rows = order // self.k                        # [T·k] their token rows
        w = weights.flatten()[order].unsqueeze(1)     # [T·k, 1]
        counts = torch.bincount(flat, minlength=self.w_down.shape[0]).tolist()
        out = self.shared(x) if self.shared is not None else torch.zeros_like(x)
        start = 0
        for e, n in enumerate(counts):
            if n == 0:
                continue
            r = rows[start:start + n]
            gate, up = F.linear(x.index_select(0, r), self.w_gate_up[e]).chunk(2, dim=-1)
            out.index_add_(0, r, F.linear(F.silu(gate) * up, self.w_down[e]) * w[start:start + n])
            start += n
        return out


def kv_cache_bytes(slots: int, capacity: int, kv_heads: int, head_dim: int,
                   dtype_bytes: int) -> int:
    """Bytes of one layer's :class:`KVCache`: keys and values for ``slots`` sequences of
    ``capacity`` tokens."""
    return 2 * slots * capacity * kv_heads * head_dim * dtype_bytes


class KVCache:
    """Preallocated keys and values of one layer: ``k``, ``v`` are [S, K, C, D]."""

    def __init__(self, slots: int, kv_heads: int, capacity: int, head_dim: int,
                 dtype: torch.dtype, device: torch.device):
        shape = (slots, kv_heads, capacity, head_dim)
        self.k = torch.zeros(shape, dtype=dtype, device=device)
        self.v = torch.zeros(shape, dtype=dtype, device=device)

    @property
    def slots(self) -> int:
        """Sequences the cache holds."""
        return self.k.shape[0]

    @property
    def capacity(self) -> int:
        """Tokens per sequence the cache holds."""
        return self.k.shape[2]


@dataclass
class DecodeGroup:
    """Decode entries attended in one SDPA call, padded to the group's longest context."""

    tokens: torch.Tensor            # [B] their rows in the packed batch
    slots: slice                    # consecutive cache slots, read through a view
    length: int                     # longest context + 1 (the new token)
    mask: torch.Tensor | None       # [B, 1, 1, length] True where a key is real; None if all equal


@dataclass
class Batch:
    """Device-side description of one packed step, built once by :func:`prepare`."""

    entries: list[tuple[int, int, int]]  # (slot, new_tokens, context_before)
    tokens: int                          # T
    pos: torch.Tensor                    # [T] absolute position of each new token
    slot_of: torch.Tensor                # [T] cache slot of each new token
    last: torch.Tensor                   # [entries] packed row of each entry's last token
    prefills: list[tuple[int, int, int, int]] = field(default_factory=list)  # (row, slot, n, ctx)
    decodes: list[DecodeGroup] = field(default_factory=list)


def prepare(entries: list[tuple[int, int, int]], device: torch.device) -> Batch:
    """Pack ``entries`` (slot, new_tokens, context_before) into a :class:`Batch`.

    Host-side work only (plus small index copies), so a timed or graph-captured
    forward does not include it.
    """
    pos: list[int] = []
    slot_of: list[int] = []
    last: list[int] = []
    prefills = []
    decodes = []  # (ctx, row, slot)
    row = 0
    for slot, n, ctx in entries:
        if n < 1:
            raise ValueError("every entry needs at least one new token")
        pos.extend(range(ctx, ctx + n))
        slot_of.extend([slot] * n)
        if n > 1:
            prefills.append((row, slot, n, ctx))
        else:
            decodes.append((ctx, row, slot))
        row += n
        last.append(row - 1)

    def tensor(xs: list[int]) -> torch.Tensor:
        return torch.tensor(xs, dtype=torch.long, device=device)

    groups: list[DecodeGroup] = []
    decodes.sort()
    i = 0
    while i < len(decodes):
        j = i + 1
        while j < len(decodes) and decodes[j][0] + 1 <= DECODE_BUCKET_RATIO * (decodes[i][0] + 1):
            j += 1
        # A bucket over scattered slots would gather (copy) its K/V out of the cache every
        # layer, 2-4x the cost of reading it in place (tiny, CPU), which no paged-attention
        # server pays: it is split into runs of consecutive slots, read through views.
        part = sorted(decodes[i:j], key=lambda d: d[2])
        a = 0
        while a < len(part):
            b = a + 1
            while b < len(part) and part[b][2] == part[b - 1][2] + 1:
                b += 1
            run = part[a:b]
            lens = [c + 1 for c, _, _ in run]
            mask = None
            if min(lens) != max(lens):
                mask = (torch.arange(max(lens), device=device)[None, :]
                        < tensor(lens)[:, None]).view(len(run), 1, 1, max(lens))
            groups.append(DecodeGroup(tokens=tensor([r for _, r, _ in run]),
                                      slots=slice(run[0][2], run[0][2] + len(run)),
                                      length=max(lens), mask=mask))
            a = b
        i = j
    return Batch(entries=list(entries), tokens=row, pos=tensor(pos), slot_of=tensor(slot_of),
                 last=tensor(last), prefills=prefills, decodes=groups)


def _attend_folded(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                   mask: torch.Tensor | None) -> torch.Tensor:
    """Grouped-query attention with the query heads of each KV head folded into rows.

    q [B, H, n, D], k/v [B, K, L, D], mask broadcastable to [B, 1, n, L] (True = visible).
    Viewing q as [B, K, (H/K)·n, D] lets every kernel (including masked ones that know
    nothing of GQA) read each KV head once, with no repeated copy of the cache.
    """
    b, h, n, d = q.shape
    kv = k.shape[1]
    qf = q.reshape(b, kv, (h // kv) * n, d)
    if mask is not None:
        # Rows are ordered (head in group, query), so the per-query mask repeats per head.
        mask = mask.expand(b, 1, n, mask.shape[-1]).repeat(1, 1, h // kv, 1)
    return unfold_heads(F.scaled_dot_product_attention(qf, k, v, attn_mask=mask), h, n)


def unfold_heads(o: torch.Tensor, heads: int, n: int) -> torch.Tensor:
    """Folded attention output [B, K, (H/K)·n, D] back to [B, H, n, D].

    A reshape, not a view: CUDA's flash and memory-efficient kernels return their
    output laid out as [B, rows, K, D] in memory (a transposed view), where KV heads
    and rows cannot merge without a copy; CPU kernels return it contiguous.
    """
    return o.reshape(o.shape[0], heads, n, o.shape[-1])


class DecoderLayer(nn.Module):
    """One decoder layer of a (possibly tensor-parallel-sharded) Llama-family model; with
    ``moe`` its MLP is the shard's mixture of experts."""

    def __init__(self, d: Shard, max_pos: int, moe: bool = False):
        super().__init__()
        self.d = d
        self.attn_norm = RMSNorm(d.hidden)
        self.wqkv = nn.Linear(d.hidden, (d.heads + 2 * d.kv_heads) * d.head_dim, bias=d.qkv_bias)
        self.wo = nn.Linear(d.heads * d.head_dim, d.hidden, bias=False)
        self.mlp_norm = RMSNorm(d.hidden)
        self.mlp: SwiGLU | MoE = MoE(d) if moe else SwiGLU(d.hidden, d.intermediate)
        self.rotary = Rotary(d.head_dim, max_pos, d.rope_theta)

    def project(self, x: torch.Tensor, batch: Batch
                ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Norm, QKV projection and rotary: x [T, hidden] → q [T, H, D], k/v [T, K, D]."""
        d = self.d
        qkv = self.wqkv(self.attn_norm(x))
        q, k, v = qkv.split([d.heads * d.head_dim, d.kv_heads * d.head_dim,
                             d.kv_heads * d.head_dim], dim=-1)
        q = self.rotary(q.view(-1, d.heads, d.head_dim), batch.pos)
        k = self.rotary(k.view(-1, d.kv_heads, d.head_dim), batch.pos)
        return q, k, v.view(-1, d.kv_heads, d.head_dim)

    def attend(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, cache: KVCache,
               batch: Batch) -> torch.Tensor:
        """Write k/v into the cache, attend each entry to its context: → [T, H·D]."""
        d = self.d
        cache.k[batch.slot_of, :, batch.pos] = k  # advanced indices first: [T, K, D]
        cache.v[batch.slot_of, :, batch.pos] = v
        out = torch.empty_like(q)  # [T, H, D]
        for row, slot, n, ctx in batch.prefills:
            qe = q[row:row + n].transpose(0, 1).unsqueeze(0)  # [1, H, n, D]
            ke = cache.k[slot:slot + 1, :, :ctx + n]          # [1, K, ctx+n, D]
            ve = cache.v[slot:slot + 1, :, :ctx + n]
            if ctx == 0:
                # Plain causal attention: the flash kernels take GQA directly.
                o = F.scaled_dot_product_attention(qe, ke, ve, is_causal=True,
                                                   enable_gqa=d.heads != d.kv_heads)
            else:
                # Query i sits at position ctx+i and sees keys 0..ctx+i.
                qpos = torch.arange(ctx, ctx + n, device=q.device)[:, None]
                mask = torch.arange(ctx + n, device=q.device)[None, :] <= qpos  # [n, ctx+n]
                o = _attend_folded(qe, ke, ve, mask)
            out[row:row + n] = o[0].transpose(0, 1)
        for g in batch.decodes:
            qg = q[g.tokens].unsqueeze(2)                # [B, H, 1, D]
            kg = cache.k[g.slots, :, :g.length]          # [B, K, L, D]
            vg = cache.v[g.slots, :, :g.length]
            out[g.tokens] = _attend_folded(qg, kg, vg, g.mask).squeeze(2)
        return out.flatten(1)

    def finish(self, x: torch.Tensor, attn: torch.Tensor) -> torch.Tensor:
        """Output projection, residual, MLP (SwiGLU or experts), residual: → [T, hidden]."""
        h = x + self.wo(attn)
        return h + self.mlp(self.mlp_norm(h))

    def forward(self, x: torch.Tensor, cache: KVCache, batch: Batch) -> torch.Tensor:
        """A full layer over the packed batch: x [T, hidden] → [T, hidden]."""
        return self.finish(x, self.attend(*self.project(x, batch), cache, batch))


class LMHead(nn.Module):
    """Final norm, vocabulary projection and Gumbel-max sampling of each entry's last token."""

    def __init__(self, d: Shard):
        super().__init__()
        self.norm = RMSNorm(d.hidden)
        self.proj = nn.Linear(d.hidden, d.vocab, bias=False)

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        """h [seqs, hidden] → sampled token ids [seqs]."""
        logits = self.proj(self.norm(h)).float()  # [seqs, V]
        # argmax(logits − log E), E ~ Exp(1), draws from softmax(logits) without a sync.
        noise = torch.empty_like(logits).exponential_()
        return torch.argmax(logits - noise.log(), dim=-1)


class Decoder(nn.Module):
    """Embedding, ``layers`` decoder layers, LM head; one KV cache per layer."""

    def __init__(self, d: Shard, layers: int, max_pos: int):
        super().__init__()
        self.d = d
        self.embed = nn.Embedding(d.vocab, d.hidden)
        # A mixture of experts keeps a dense MLP in its first dense_layers layers.
        self.layers = nn.ModuleList(
            DecoderLayer(d, max_pos, bool(d.experts) and i >= d.dense_layers)
            for i in range(layers))
        self.head = LMHead(d)

    def caches(self, slots: int, capacity: int) -> list[KVCache]:
        """Fresh KV caches for every layer, on this model's device and dtype."""
        p = self.embed.weight
        return [KVCache(slots, self.d.kv_heads, capacity, self.d.head_dim, p.dtype, p.device)
                for _ in self.layers]

    def forward(self, tokens: torch.Tensor, caches: list[KVCache], batch: Batch) -> torch.Tensor:
        """One step: tokens [T] → next token per entry [entries] (on the device)."""
        x = self.embed(tokens)  # [T, hidden]
        for layer, cache in zip(self.layers, caches, strict=True):
            x = layer(x, cache, batch)
        return self.head(x[batch.last])


TORCH_DTYPES = {"fp32": torch.float32, "fp16": torch.float16, "bf16": torch.bfloat16}


def build_decoder(d: Shard, layers: int, max_pos: int, dtype: str, device: torch.device,
                  seed: int = 0) -> Decoder:
    """A randomly initialised :class:`Decoder` on ``device`` in ``dtype`` (no downloads)."""
    torch.manual_seed(seed)
    # Build directly in the target dtype: an fp32 detour would need twice the memory.
    previous = torch.get_default_dtype()
    torch.set_default_dtype(TORCH_DTYPES[dtype])
    try:
        with torch.device(device):
            model = Decoder(d, layers, max_pos)
    finally:
        torch.set_default_dtype(previous)
    if device.type != "meta":
        # Small weights keep activations finite at any depth; values do not affect timing.
        with torch.no_grad():
            for p in model.parameters():
                if p.dim() > 1:
                    p.normal_(std=0.02)
    return model.eval()
