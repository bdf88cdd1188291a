"""One iteration's work, whole: the :class:`Batch` a policy returns and the
:class:`DecodeGroup` whose members it may include without listing them.

A batch maps each request to the tokens it computes this iteration: a whole prompt, a
prefill chunk (fewer than the request's pending tokens), or 1 for a decode. Listing
every running decode would cost O(batch) Python work per iteration, so a replica keeps
its steady decodes as one aggregate (:class:`sim.core.decodeset.DecodeSet`, which
implements :class:`DecodeGroup`), whose :meth:`DecodeGroup.reserve` includes them all
in the batch a policy builds: the batch then still describes the whole iteration (its
sequences, its step shape, its step-log entries), at O(1) cost for the group.

State layer: no clock; the policies, the replica and calibrate's replay loop use it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from sim.core.histogram import LogHistogram
from sim.core.request import Request
from sim.cost.shape import StepShape, batch_shape


class DecodeGroup(Protocol):
    """The running steady decodes a replica advances as one aggregate.

    ``n``: its members (each decodes one token in an iteration that includes the group).
    Policies call :meth:`reserve` and :meth:`flush`; the replica and :class:`Batch` call
    the rest.
    """

    n: int
    # Tokens the members emitted in the last iteration that included the group (n, or
    # more with speculative decoding).
    emitted: int

    def reserve(self, running: list[Request], batch: Batch, prefix: bool = False,
                spare: int = 0) -> bool:
        """Take the blocks every member's next token needs, if the members are all of
        ``running`` (with ``prefix``: its leading entries) and the blocks fit without
        preemption with ``spare`` more left over (blocks the caller's other running
        requests will take), and include the group in ``batch`` (when it has members);
        True when they did."""
        ...

    def flush(self, running: list[Request]) -> None:
        """Write the members' exact fields back and dissolve the group, so the policy
        can decode them one by one (and preempt)."""
        ...

    def shape(self) -> StepShape:
        """The step shape of the members' decodes this iteration."""
        ...

    def log_entries(self, running: list[Request]) -> list[tuple[int, int, int]]:
        """(id, 1, computed) of each member, in running order."""
        ...

    def end_step(self, itl: LogHistogram, now: float) -> list[Request] | None:
        """The iteration ended at ``now`` (s): every member emitted a token (its gap goes
        to ``itl``) and the group moves one tick on; the members that emitted their last
        token, settled and out of the group (None: none)."""
        ...


class Batch(dict[Request, int]):
    """The tokens each request computes in one iteration (the mapping: listed entries)
    plus, when :attr:`group` is set, one decode token for each of the group's members.

    :attr:`seqs`, :meth:`shape` and :meth:`log_entries` count the group's members with
    the entries; a batch with ``seqs == 0`` runs nothing. Its truth value is a dict's
    (listed entries only), which keeps the policies' own ``if batch`` tests C-fast.
    """

    __slots__ = ("group", "verified", "accepted")

    def __init__(self) -> None:
        self.group: DecodeGroup | None = None
        # Set by advance(): listed verify entries (speculative decoding) and the tokens
        # they emitted between them.
        self.verified = 0
        self.accepted = 0

    @property
    def seqs(self) -> int:
        """Sequences in the iteration: entries plus the group's members."""
        g = self.group
        return len(self) + (g.n if g is not None else 0)

    def shape(self) -> StepShape:
        """The iteration's step shape (what the cost model prices)."""
        g = self.group
        if g is None:
            return batch_shape(self)
        if not self:
            return g.shape()
        return StepShape(*(a + b for a, b in zip(g.shape(), batch_shape(self), strict=True)))

    def log_entries(self, running: list[Request]) -> list[tuple[int, int, int]]:
        """(id, new tokens, computed before) of every sequence: the group's members (in
        ``running`` order) first, then the entries in the order they were added."""
        entries = [(r.id, n, r.computed) for r, n in self.items()]
        g = self.group
        return entries if g is None else g.log_entries(running) + entries


Emission = tuple[Sequence[Request], Sequence[Request]]
"""What an iteration's listed entries produced, in token terms (no times: the replica
stamps those), as ``(emitted, finished)``: the entries that emitted a token (their
computed tokens reached ``prompt + generated``), in batch order, and those of them that
emitted their last token. A plain tuple: one is built per iteration."""

_NOTHING: Emission = ((), ())


def advance(batch: Batch) -> Emission:
    """Apply an iteration that ran ``batch`` to its listed entries: each one's computed
    tokens grow by its count, and an entry whose KV then covers ``prompt + generated``
    emits a token. An entry past that is a speculative verify (its pending token and
    drafted ones, :func:`verify`), which emits one or more. Touches no KV block and no
    clock. The group's members are not touched: their fields derive from the group's
    tick, which moves when the replica delivers the iteration
    (:meth:`DecodeGroup.end_step`)."""
    if not batch:
        return _NOTHING
    emitted: list[Request] = []
    finished: list[Request] = []
    for r, n in batch.items():
        c = r.computed + n
        t = r.prompt + r.generated
        if c == t:
            r.computed = c
            r.generated += 1
        elif c > t:
            batch.verified += 1
            batch.accepted += verify(r, n)
        else:
            r.computed = c
            continue
        emitted.append(r)
        if r.generated == r.output:
            finished.append(r)
    return emitted, finished


def verify(r: Request, n: int) -> int:
    """Apply a verify of ``n`` tokens (the pending one and ``n - 1`` drafted) to ``r``:
    it keeps its next draw's tokens, at most ``n`` and at most what its output still
    lacks; their KV stays and the last of them is its new pending token. Returns how
    many it emitted."""
    tokens, _, first = r.draws
    m = min(int(tokens[first + r.verifies]), n, r.output - r.generated)
    r.verifies += 1
    r.computed += m
    r.generated += m
    r.verified += m
    return m
