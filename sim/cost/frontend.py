"""The API server's per-request latency outside the engine's steps.

A client's request first passes the server's frontend (HTTP parsing, chat template,
tokenisation) before the engine can schedule it, and every token the engine produces
passes it again on the way out (detokenisation, streaming). Neither is a function of a
batch's shape, so neither is part of ``step_time``; a cost model carries them as a
:class:`Frontend`, and the engine delays a request's delivery by
:meth:`Frontend.request_delay` and the client's view of each of its tokens by
``response_s``. Client-side TTFT (what ``vllm bench serve`` reports) then has the floor
real servers show. Pure Python: no numpy, no simpy.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from sim.configtools import bounded

# The coefficients' names, in the order profiles and docs list them.
FRONTEND_COEFS = ("request_s", "per_prompt_token_s", "response_s", "jitter_s")
# The most each may be (s; s a token): past an hour a request, or a second a prompt
# token, no server takes, and such sums with the clock lose a step's resolution.
FRONTEND_LIMITS = {"request_s": 3600.0, "per_prompt_token_s": 1.0, "response_s": 3600.0,
                   "jitter_s": 3600.0}


@dataclass(frozen=True)
class Frontend:
    """Per-request frontend latency, seconds.

    ``request_s`` + ``per_prompt_token_s``·prompt tokens + a random extra (exponential,
    mean ``jitter_s``, drawn per request from the run's seed) pass between the client
    sending a request and the engine seeing it; ``response_s`` between the engine
    emitting a token and the client receiving it (so TTFT and E2E grow by it, TPOT and
    ITL not). The jitter is why requests sent together do not reach an engine together:
    it schedules what has arrived when it next looks, so a burst splits over steps.
    """

    request_s: float = bounded(0.0, ge=0, le=FRONTEND_LIMITS["request_s"])
    per_prompt_token_s: float = bounded(0.0, ge=0, le=FRONTEND_LIMITS["per_prompt_token_s"])
    response_s: float = bounded(0.0, ge=0, le=FRONTEND_LIMITS["response_s"])
    jitter_s: float = bounded(0.0, ge=0, le=FRONTEND_LIMITS["jitter_s"])

    def request_delay(self, prompt_tokens: Any, jitter: Any = 0.0) -> Any:
        """Seconds from the client sending a request of ``prompt_tokens`` tokens to the
        engine seeing it, ``jitter`` being that request's draw of the random extra
        (numbers, or numpy arrays of one per request)."""
        return self.request_s + self.per_prompt_token_s * prompt_tokens + jitter

    @property
    def delays(self) -> bool:
        """Whether requests reach the engine later than they are sent."""
        return self.request_s > 0 or self.per_prompt_token_s > 0 or self.jitter_s > 0

    @property
    def active(self) -> bool:
        """Whether any term is non-zero (a zero frontend leaves a run exactly as without)."""
        return self.delays or self.response_s > 0


NO_FRONTEND = Frontend()
