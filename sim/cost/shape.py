"""The shape of one batch iteration: the only thing a cost model sees.

A batch is a set of entries (new_tokens, context_before): a decode entry has
new_tokens == 1; a prefill (or prefill chunk) has new_tokens > 1 and may start after
context already in the KV cache. Cost models read these aggregates, never requests.
Every field may also be a numpy array (one element per step) so a run of steps can be
costed in one vectorised call.
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
        """Entries with exactly one new token."""
        return self.seqs - self.prefill_seqs


def shape_of(entries: Iterable[tuple[int, int]]) -> StepShape:
    """The :class:`StepShape` of ``entries``, an iterable of (new_tokens, context_before)."""
    seqs = new = ctx = p_seqs = p_tok = pairs = d_kv = 0
    for n, c in entries:
        seqs += 1
        new += n
        ctx += c
        if n > 1:
            p_seqs += 1
            p_tok += n
            pairs += n * c + n * (n + 1) // 2
        else:
            d_kv += c + 1
    return StepShape(seqs, new, ctx, p_seqs, p_tok, pairs, d_kv)


def decode_shape(seqs: int, context_tokens: int) -> StepShape:
    """Shape of a decode-only step of ``seqs`` sequences holding ``context_tokens`` in cache."""
    return StepShape(seqs, seqs, context_tokens, 0, 0, 0, context_tokens + seqs)


def batch_shape(batch: Mapping[Request, int]) -> StepShape:
    """The :class:`StepShape` of a batch ({request: new_tokens}; see :func:`shape_of`)."""
    return shape_of((n, r.computed) for r, n in batch.items())
