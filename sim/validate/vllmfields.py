"""The fields of the JSON that ``vllm bench serve --save-result`` writes, read one by one:
:data:`RULES` states what each may hold, and every reader here refuses anything else
with one line naming the key (or the request's index), the value and the rule. The
run-level facts (``request_rate``, ``burstiness``, a ramp-up) become the client's
:class:`sim.validate.vllmclient.Pacing`; :mod:`sim.validate.vllm_results` reads the
whole file with them.
"""

from __future__ import annotations

import math
from typing import Any

from sim.configtools import MAX_INT, MAX_TIME_S, is_number
from sim.errors import ServesimError
from sim.validate import vllmclient

# The rules for each field, stated once; every refusal quotes one of them.
RULES = {
    # vLLM counts tokens in whole numbers; a failed request's output is written as 0.
    # Past 2**53 a count is no real length and would overflow the int64 arrays.
    "tokens": "a whole number of tokens, 0 or more and below 2**53",
    # Client-side perf_counter differences: never negative, never NaN; a latency of
    # years is no measurement (and a sum of such overflows).
    "seconds": "a finite number of seconds, 0 or more and below 1e9",
    # perf_counter readings: only their differences mean anything, so any finite value.
    "clock": "a finite number (a send time in seconds)",
    "ms": "a finite number of milliseconds, 0 or more",
    "rate": 'a number of requests per second above 0, or "inf"',
    "burstiness": "a number above 0 (1 = Poisson; Infinity = evenly spaced)",
    "concurrency": "null or a whole number of requests, 0 (no cap) or more",
    # vLLM's benchmark times the whole run: never 0, never a string.
    "duration": "null or a finite number of seconds above 0 and below 1e9",
    "count": "null or a whole number of requests, 0 or more",
    "error": 'a string ("" when the request succeeded) or null',
}


def refuse(x: Any, rule: str, where: str, src: str | None, hint: str = "") -> ServesimError:
    """The one-line error for value ``x`` at ``where`` breaking ``RULES[rule]``."""
    return ServesimError(f"got {x!r}, expected {RULES[rule]}{hint}", source=src, where=where)


def whole(x: Any, where: str, src: str | None, rule: str = "tokens") -> int:
    """A count: whole (1000.0 counts as 1000), 0 or more, below 2**53."""
    whole = is_number(x) and (isinstance(x, int) or (math.isfinite(x) and x.is_integer()))
    if not whole or not 0 <= x < MAX_INT:
        raise refuse(x, rule, where, src)
    return int(x)


# The longest span of send times (s) a run may have: the simulated clock's bound, past
# which a float second no longer resolves a latency (and no benchmark runs 30 years).
MAX_SPAN_S = MAX_TIME_S


def seconds(x: Any, where: str, src: str | None, rule: str = "seconds",
             hint: str = "") -> float:
    """A latency (or, with ``rule="ms"``, an aggregate): finite and 0 or more (a latency
    below :data:`MAX_SPAN_S` too)."""
    limit = MAX_SPAN_S if rule == "seconds" else math.inf
    if not is_number(x) or not math.isfinite(x) or not 0 <= x < limit:
        raise refuse(x, rule, where, src, hint)
    return float(x)


def request_rate(x: Any, src: str | None) -> float | None:
    """``request_rate`` in req/s (inf for vLLM's ``"inf"``), or None where absent."""
    if x is None:
        return None
    if x == "inf" or (is_number(x) and x > 0 and not math.isnan(x)):
        return float(x)
    raise refuse(x, "rate", "request_rate", src)


def burstiness(x: Any, src: str | None) -> float:
    """vLLM's gamma shape; absent (older vLLM, before the option) means Poisson, 1."""
    if x is None:
        return 1.0
    if not is_number(x) or math.isnan(x) or not x > 0:
        raise refuse(x, "burstiness", "burstiness", src)
    return float(x)


# vLLM's ramp-up strategies (``--ramp-up-strategy``).
RAMPS = ("linear", "exponential")


def pacing(data: dict[str, Any], rate: float, shape: float, src: str) -> vllmclient.Pacing:
    """How the client paced the requests: ``request_rate`` and ``burstiness``, or the
    ramp-up that vLLM writes with ``request_rate`` "inf" (its strategy and start and end
    rates, checked as vLLM's client checks them)."""
    kind = data.get("ramp_up_strategy")
    if kind is None:
        return vllmclient.Pacing(rate, shape)
    if kind not in RAMPS:
        raise ServesimError(f"got {kind!r}, expected one of {', '.join(RAMPS)} (vLLM's "
                            "--ramp-up-strategy)", source=src, where="ramp_up_strategy")
    if not math.isinf(rate):
        raise ServesimError(f"got {rate:g} with a {kind} ramp-up, expected \"inf\": vLLM's "
                            "client refuses a request rate beside a ramp-up",
                            source=src, where="request_rate")
    ends = []
    for key in ("ramp_up_start_rps", "ramp_up_end_rps"):
        x = data.get(key)
        if not is_number(x) or not math.isfinite(x) or x < 0:
            raise ServesimError(f"got {x!r}, expected a number of requests per second, 0 "
                                f"or more (a {kind} ramp-up needs it)", source=src, where=key)
        ends.append(float(x))
    start, end = ends
    # vLLM's client refuses both before it sends anything (a ramp from 0 would give
    # request 0 no rate), so no run of it has them.
    if start == 0:
        raise ServesimError(f"got 0 with {kind} ramp-up, expected a start above 0 "
                            "(vLLM's client cannot pace request 0 at 0 req/s)",
                            source=src, where="ramp_up_start_rps")
    if not end > start:
        raise ServesimError(f"got {end:g} with a start of {start:g} req/s, expected an end "
                            "above the start, as vLLM's client requires",
                            source=src, where="ramp_up_end_rps")
    return vllmclient.Pacing(math.inf, shape, (str(kind), start, end))


def clock(x: Any, where: str, src: str | None) -> float:
    """A send time (perf_counter seconds): any finite number."""
    if not is_number(x) or not math.isfinite(x):
        raise refuse(x, "clock", where, src)
    return float(x)
