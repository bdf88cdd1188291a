"""SGLang's default share of a GPU for weights and KV cache (``--mem-fraction-static``).

SGLang gives its weights and KV pool ``mem_fraction_static`` of the GPU and leaves the
rest to activations and CUDA graphs. Left unset, the server derives it from the GPU's
memory and its own settings (``ServerArgs`` in sglang/srt/server_args.py), by one of two
rules:

- releases before 0.5.3 reserve a lump per memory tier, grown by the tensor- and
  pipeline-parallel size: (2.8 + p/10) GiB under 35 GiB, (9.5 + p/2) GiB under 90 GiB
  (A100, H100), (12 + p/2) GiB under 160 GiB (H20, H200), 32 GiB above (B200), p the
  tp × pp GPUs; 2 GiB more with a speculative drafter (6 with a standalone draft model),
  4 GiB more with data-parallel attention;
- from 0.5.3 (PR 10975, merged 2025-09-27, after 0.5.2) the reserve is summed from the
  settings it covers: 512 MiB of fixed metadata, 1.5 MiB a token of the chunked-prefill
  size (at least 2,048), 2 MiB a sequence of the largest CUDA-graph decode batch,
  1 GiB per 8 tp × pp GPUs, with data-parallel attention 3 MiB a graph sequence a rank
  (1.5 more past 300 sequences), 8 MiB a piecewise prefill graph where prefills are
  graphed (from 0.5.10), at least 10 GiB on a GPU over 60 GiB, then the drafter's 2 or 6
  GiB (none for n-gram).

The fraction is (memory − reserve) / memory, rounded to three places. SGLang reads the
memory from nvidia-smi's total; servesim uses the memory the device reports
(:attr:`sim.cost.gpus.GPUSpec.mem_bytes`, e.g. 81,106 MiB against nvidia-smi's 81,559 on
an H100), which moves the fraction by about 0.001. Pure: no I/O.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sim.cost.eager import sglang_decode_cap, sglang_graphs_prefill, sglang_since

if TYPE_CHECKING:
    from sim.cost.gpus import GPUSpec
    from sim.cost.specs import ModelSpec

# The first release whose reserve is summed term by term (PR 10975).
SUMMED_RESERVE = (0, 5, 3)
# Its merge day: a nightly build from then on has the summed reserve.
SUMMED_RESERVE_DAY = "20250927"
_GIB = 1024.0  # MiB


def summed_reserve(version: str | None) -> bool:
    """Whether an SGLang release sums its memory reserve term by term (0.5.3 and later)
    rather than by tier. A name that is neither a release nor a dated build (None, a
    custom build such as ``nightly-dev``) counts as the newest."""
    # Release names may carry a leading "v" (v0.5.2), which the shared reader does not take.
    return sglang_since(version and version.strip().removeprefix("v"), SUMMED_RESERVE,
                        SUMMED_RESERVE_DAY)


def sglang_chunk(gpu: GPUSpec) -> int:
    """SGLang's default ``--chunked-prefill-size`` (tokens) by the GPU's memory: 2,048
    under 35 GiB, 4,096 under 60, 8,192 under 160 (A100, H100, H200), 16,384 above (B200,
    B300)."""
    gib = gpu.mem_bytes / 2**30
    if gib < 35:
        return 2048
    if gib < 60:
        return 4096
    return 8192 if gib < 160 else 16384


def piecewise_graphs(max_tokens: int) -> int:
    """How many piecewise prefill graphs SGLang captures up to ``max_tokens`` tokens: every
    4 to 32, 16 to 256, 32 to 512, 64 to 1,024, 256 to 4,096, then 512."""
    steps = ((4, 32, 4), (48, 256, 16), (288, 512, 32), (576, 1024, 64), (1280, 4096, 256),
             (4608, max(max_tokens, 4608), 512))
    return sum(len(range(lo, min(hi, max_tokens) + 1, step)) for lo, hi, step in steps)


def _tiered_mib(gib: float, parallel: int, speculative: str | None, dp: int) -> float:
    """Releases before 0.5.3: the reserve (MiB) of the GPU's memory tier."""
    if gib < 35:
        reserve = (2.8 + parallel / 10) * _GIB
    elif gib < 90:
        reserve = (9.5 + parallel / 2) * _GIB
    elif gib < 160:
        reserve = (12 + parallel / 2) * _GIB
    else:
        reserve = 32 * _GIB
    if speculative is not None:
        reserve += (6 if speculative == "draft" else 2) * _GIB
    return reserve + (4 * _GIB if dp > 1 else 0.0)


def _summed_mib(gib: float, parallel: int, chunk: int, graph_bs: int, dp: int,
                speculative: str | None, piecewise: int) -> float:
    """0.5.3 and later: the reserve (MiB) summed from the settings it covers."""
    reserve = 512 + max(chunk, 2048) * 1.5 + graph_bs * 2 + parallel / 8 * _GIB
    if dp > 1:
        reserve += graph_bs * dp * 3 + (graph_bs * dp * 1.5 if graph_bs > 300 else 0.0)
    reserve += piecewise * 8
    if gib > 60:
        reserve = max(reserve, 10 * _GIB)
    if speculative is not None and speculative != "ngram":
        reserve += (6 if speculative == "draft" else 2) * _GIB
    return reserve


def sglang_static_fraction(version: str | None, gpu: GPUSpec, model: ModelSpec, gpus: int,
                           pp: int = 1, dp: int = 1, chunk: int | None = None,
                           graph_bs: int | None = None,
                           speculative: str | None = None) -> float:
    """SGLang's default ``mem_fraction_static`` for a server of release ``version`` on
    ``gpus`` tensor-parallel GPUs of ``gpu`` (SGLang's tp_size: all of them, data-parallel
    attention ranks included) and ``pp`` pipeline stages, ``dp`` data-parallel attention
    ranks, serving ``model``; ``chunk`` its chunked-prefill size (tokens; None: the
    default, :func:`sglang_chunk`), ``graph_bs`` its largest CUDA-graph decode batch (None:
    :func:`sim.cost.eager.sglang_decode_cap`), ``speculative`` servesim's drafting method
    (``draft`` is SGLang's standalone draft model; None: no speculation). A fraction of
    the GPU's memory, three decimals, as SGLang rounds it."""
    mib = gpu.mem_bytes / 2**20
    gib = mib / _GIB
    parallel = gpus * pp
    if summed_reserve(version):
        chunk = sglang_chunk(gpu) if chunk is None else chunk
        bs = sglang_decode_cap(gpu, gpus) if graph_bs is None else graph_bs
        # Piecewise prefill graphs up to the chunk (2,048 tokens under latent attention).
        top = 2048 if model.kv_lora_rank else chunk
        pieces = piecewise_graphs(top) if sglang_graphs_prefill(version, model) else 0
        reserve = _summed_mib(gib, parallel, chunk, bs, dp, speculative, pieces)
    else:
        reserve = _tiered_mib(gib, parallel, speculative, dp)
    return round((mib - reserve) / mib, 3)
