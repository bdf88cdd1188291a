"""The shape of one batch iteration: the only thing a cost model sees.

A batch is a set of entries (new_tokens, context_before): a decode entry has
new_tokens == 1 (or, a speculative verify, k + 1: :func:`batch_shape`); a prefill (or
prefill chunk) has new_tokens > 1 and may start after context already in the KV cache.
Cost models read these aggregates, never requests. Every field may also be a numpy
array (one element per step) so a run of steps can be costed in one vectorised call.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from sim.core.request import Request


class StepShape(NamedTuple):
    """Aggregates of one iteration's batch; all counts in tokens or sequences.

    - ``seqs``: entries in the batch.
    - ``new_tokens``: tokens computed this step (sum of new_tokens).
    - ``context_tokens``: tokens already in the KV cache before the step (sum of context_before).
    - ``prefill_seqs`` / ``prefill_tokens``: entries with new_tokens > 1 and their new tokens.
    - ``prefill_pairs``: causal query-key pairs of those entries,
      sum of new·ctx + new·(new+1)/2.
    - ``decode_kv``: KV tokens the decode entries attend to, sum of ctx + 1.

    A speculative verify (k + 1 new tokens of a steady decode) is a decode entry: it
    counts in ``seqs`` and its tokens in ``new_tokens``, not in the prefill fields, and
    adds ctx + 1 to ``decode_kv`` (:func:`batch_shape`). Decode tokens,
    ``new_tokens - prefill_tokens``, then exceed ``decode_seqs``.
    """

    seqs: Any
    new_tokens: Any
    context_tokens: Any
    prefill_seqs: Any
    prefill_tokens: Any
    prefill_pairs: Any
    decode_kv: Any

    @property
    def decode_seqs(self) -> Any:
        """Decode entries: one new token, or a speculative verify's."""
        return self.seqs - self.prefill_seqs


def shape_of(entries: Iterable[tuple[int, int]]) -> StepShape:
    """The :class:`StepShape` of ``entries``, an iterable of (new_tokens, context_before):
    an entry of one new token a decode, of more a prefill (chunk)."""
    return _counted((n, c, n <= 1) for n, c in entries)


def _counted(entries: Iterable[tuple[int, int, bool]]) -> StepShape:
    """The :class:`StepShape` of (new_tokens, context_before, is_decode) entries."""
    seqs = new = ctx = p_seqs = p_tok = pairs = d_kv = 0
    for n, c, decode in entries:
        seqs += 1
        new += n
        ctx += c
        if decode:
            d_kv += c + 1
        else:
            p_seqs += 1
            p_tok += n
            pairs += n * c + n * (n + 1) // 2
    return StepShape(seqs, new, ctx, p_seqs, p_tok, pairs, d_kv)


def decode_shape(seqs: int, context_tokens: int) -> StepShape:
    """Shape of a decode-only step of ``seqs`` sequences holding ``context_tokens`` in cache."""
    return verify_shape(seqs, 1, context_tokens)


def verify_shape(seqs: int, width: int, context_tokens: int) -> StepShape:
    """Shape of a step of ``seqs`` speculative verifies of ``width`` tokens each (k + 1)
    after ``context_tokens`` cached between them: decode entries (:func:`batch_shape`)."""
    return StepShape(seqs, seqs * width, context_tokens, 0, 0, 0, context_tokens + seqs)


def batch_shape(batch: Mapping[Request, int]) -> StepShape:
    """The :class:`StepShape` of a batch ({request: new_tokens}; see :func:`shape_of`),
    where a speculative verify (a steady decode's pending token and its drafted ones,
    more than one new token) is a decode entry: its new tokens count, and it attends to
    its context as a decode does (``decode_kv`` gains its context + 1), since engines run
    verifies on their decode kernels, one read of each sequence's KV with the k + 1
    queries beside it (vLLM's attention backends that treat speculation as decode, the
    latent-attention ones among them; TensorRT-LLM's generation kernels for MTP)."""
    return _counted((n, r.computed, n <= 1 or r.pending_tokens == 1) for r, n in batch.items())
