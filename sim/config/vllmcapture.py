"""The largest CUDA-graph capture size vLLM's flags set (``serving.cuda_graph_max_tokens``).

vLLM replays CUDA graphs only for steps of at most its largest capture size in tokens;
a larger step runs torch.compile's code without a graph (sim/cost/eager.py prices its
dispatch). Four spellings set that size:

- ``max-cudagraph-capture-size N`` (and ``compilation-config``'s key of that name,
  also as ``-cc.max_cudagraph_capture_size``): N tokens;
- ``cudagraph-capture-sizes`` in ``compilation-config`` (or ``-cc.``): the sizes
  captured, of which the largest bounds the graphed steps;
- ``cuda-graph-sizes`` (the scheduler flag of releases before 0.11): one value N
  captures 1, 2, 4 and every multiple of 8 up to N, so the largest is N rounded down to
  a multiple of 8 (N itself below 8: the largest of 1, 2 and 4 not above it); several
  values are the sizes themselves.

vLLM refuses a compilation config whose ``max_cudagraph_capture_size`` is not the
largest of its ``cudagraph_capture_sizes``, and so does this module. An empty list sets
nothing here: what each release does with one is not confirmed (docs/scenarios.md).
"""

from __future__ import annotations

import re
from typing import Any

from sim.config.vllmnames import DIGITS, compilation_config
from sim.errors import ServesimError

# Keys of vLLM's compilation config that set the capture sizes.
CONFIG_KEYS = ("max_cudagraph_capture_size", "cudagraph_capture_sizes")
# Flags (under vLLM's Python names) that set them outside a compilation config.
FLAGS = ("max_cudagraph_capture_size", "cuda_graph_sizes")
# The dotted prefixes that address the compilation config (-cc. and -O.).
_CONFIG_HEADS = ("compilation_config", "optimization_level")


def capture_size(name: str, value: Any, where: str) -> int | None:
    """The largest capture size (tokens) vLLM flag ``name`` (vLLM's Python name, dotted
    for a compilation-config key) sets with ``value``; None where it sets none (another
    kernel setting, a compilation config without these keys, a null value: vLLM's
    default). A value vLLM would not read as sizes is an error naming ``where``."""
    if value is None:
        return None  # the flag's default
    head, _, key = name.partition(".")
    if name == "compilation_config":
        config = compilation_config(value, where)
        return _from_config(config, where) if isinstance(config, dict) else None
    if head in _CONFIG_HEADS and key in CONFIG_KEYS:
        return _largest(key, value, where)
    if name in FLAGS:
        return _largest(name, value, where)
    return None


def _from_config(config: dict[str, Any], where: str) -> int | None:
    """The largest capture size a compilation-config mapping sets (None: neither key)."""
    found = {key: size for key in CONFIG_KEYS if config.get(key) is not None
             and (size := _largest(key, config[key], f"{where}.{key}")) is not None}
    if len(set(found.values())) > 1:
        raise ServesimError(f"max_cudagraph_capture_size {found['max_cudagraph_capture_size']}"
                            " is not the largest of cudagraph_capture_sizes "
                            f"({found['cudagraph_capture_sizes']}); vLLM refuses the two "
                            "unless they agree", where=where)
    return next(iter(found.values()), None)


def _largest(key: str, value: Any, where: str) -> int | None:
    """The largest size ``value`` of setting ``key`` captures (the module doc); None for
    an empty list, which releases read differently (left unpriced, with a note)."""
    sizes = _sizes(value, where, one=key == "max_cudagraph_capture_size")
    if not sizes:
        return None
    if key == "cuda_graph_sizes" and len(sizes) == 1:
        n = sizes[0]
        return n - n % 8 if n >= 8 else max(s for s in (1, 2, 4) if s <= n)
    return max(sizes)


def _sizes(value: Any, where: str, one: bool) -> list[int]:
    """``value`` as positive whole token counts: one (an integer or its digits), or with
    ``one`` false a list of them, or their text separated by spaces or commas."""
    items: list[Any]
    if isinstance(value, list) and not one:
        items = value
    elif isinstance(value, str) and not one:
        items = [v for v in re.split(r"[\s,]+", value.strip()) if v]
    else:
        items = [value]
    out: list[int] = []
    for v in items:
        if isinstance(v, str) and DIGITS.fullmatch(v.strip()):
            v = int(v.strip())
        if not isinstance(v, int) or isinstance(v, bool) or not 1 <= v < 2**53:
            what = "a positive whole number of tokens below 2**53" if one else \
                "positive whole numbers of tokens below 2**53 (one, or a list of them)"
            raise ServesimError(f"got {value!r}, expected {what}", where=where)
        out.append(v)
    return out
