"""How the public runs of Qwen3.5 (Gated DeltaNet layers) were served: SGLang's state pool.

SGLang keeps a hybrid model's Gated DeltaNet states in a pool of slots of their own
beside the attention layers' KV pool (``MambaPool``; ``handle_max_mamba_cache`` in its
model runner, 0.5.9 to 0.5.14), both out of the memory ``mem_fraction_static`` leaves
after the weights:

- with the radix cache disabled and ``--max-running-requests`` set, the pool has that
  many slots (one a running request) and the KV pool the rest;
- otherwise (its defaults: radix cache on, no limit given) the states take
  r / (1 + r) of that memory, r = ``--mamba-full-memory-ratio`` 0.9, and at most a third
  of the slots run at once (the radix cache keeps states of finished prefixes in the
  other two; ``mamba_scheduler_strategy`` no_buffer).

InferenceX's Qwen3.5-397B-A17B SGLang launch scripts (benchmarks/single_node/
qwen3.5_{bf16,fp8}_{b200,h200}.sh in SemiAnalysisAI/InferenceX, the versions stored
before they moved to fixed_seq_len/) disable the radix cache and set:

- on B200 (bf16 and fp8 alike): ``--mem-fraction-static`` 0.82,
  ``--chunked-prefill-size`` 32768, ``--max-running-requests`` 128,
  ``--scheduler-recv-interval`` 10 (30 from 16 clients), ``--stream-interval`` 30; fp8
  adds an fp8 KV cache; the states stay fp32;
- fp8 on H200 (both stored versions): 0.8, chunks of 16384, 128 running requests,
  stream interval 50, an fp8 KV cache and ``--mamba-ssm-dtype bfloat16``;
- fp4 on B200 (``qwen3.5_fp4_b200.sh``, NVIDIA's NVFP4 checkpoint, ``--quantization
  modelopt_fp4``): 0.85, chunks of 32768, recv interval 30, stream interval 30, an fp8
  KV cache, and max(128, clients) running requests.

B300 rows take the B200 settings, as for InferenceX's other models (sim/validate/
silicon.py). Its stored B300 scripts are later ones: they send one prompt a client
(``--num-prompts $CONC``), a single wave that all starts together, which the B300 rows
rule out (4 B300s prefilling 256 prompts of 8,192 tokens at once would keep the mean
client waiting for many seconds; the row measured 2.5 s).

SGLang's ``--stream-interval`` holds a request's first token back until its output is
that long (sim/core/streaming.py): a TTFT of the prefill plus N - 1 decode steps.

AIConfigurator's own Qwen3.5 runs (``qwen3.5-397b-gap-analysis.csv``) publish no launch
command; they take SGLang's defaults.
"""

from __future__ import annotations

from typing import Any

QWEN35_PATHS = ("Qwen/Qwen3.5-397B-A17B",)
# SGLang's --mamba-full-memory-ratio default, and the slots a third of which may run
# under its default radix cache (calculate_mamba_ratio's 3 for no_buffer).
FULL_MEMORY_RATIO = 0.9
RADIX_SLOTS_PER_REQUEST = 3


def qwen35_recipe(gpu: str, dtype: str, concurrency: int, experts: str = "") -> dict[str, Any]:
    """The launch settings of InferenceX's Qwen3.5 SGLang run on ``gpu`` with weights of
    ``dtype`` at ``concurrency`` clients (see the module doc): any of
    ``max_num_batched_tokens``, ``static_fraction``, ``max_running`` (SGLang's
    ``--max-running-requests``, which also sizes its state pool),
    ``scheduler_recv_interval``, ``stream_interval``, ``kv_dtype`` and ``state_dtype``;
    empty where no script is known. ``experts``: the experts' dtype where the checkpoint
    gives them their own (NVIDIA's NVFP4 release)."""
    if experts == "nvfp4":
        if gpu not in ("b200", "b300"):
            return {}
        return {"kv_dtype": "fp8", "max_num_batched_tokens": 32768, "static_fraction": 0.85,
                "max_running": 128, "stream_interval": 30, "scheduler_recv_interval": 30}
    fp8 = dtype == "fp8-block"
    out: dict[str, Any] = {"kv_dtype": "fp8"} if fp8 else {}
    if gpu in ("b200", "b300"):
        return {**out, "max_num_batched_tokens": 32768, "static_fraction": 0.82,
                "max_running": 128, "stream_interval": 30,
                "scheduler_recv_interval": 30 if concurrency >= 16 else 10}
    if gpu == "h200" and fp8:
        return {**out, "max_num_batched_tokens": 16384, "static_fraction": 0.8,
                "stream_interval": 50, "state_dtype": "bf16", "max_running": 128}
    return {}


def sglang_state_pool(room: float, state_bytes: int, max_running: int | None,
                      default_running: int) -> tuple[float, int]:
    """(bytes left for the KV pool, requests that may run) of SGLang's split of ``room``
    bytes a GPU between a hybrid model's states (``state_bytes`` a slot) and its KV
    pool: ``max_running`` slots when a launch sets it (radix cache off), else its
    default ratio with the radix cache on, running at most ``default_running`` and a
    third of the slots (the module doc)."""
    if max_running is not None:
        return room - max_running * state_bytes, max_running
    states = room * FULL_MEMORY_RATIO / (1 + FULL_MEMORY_RATIO)
    slots = int(states // state_bytes)
    return room - states, max(1, min(default_running, slots // RADIX_SLOTS_PER_REQUEST))
