"""The ``hardware`` section of a scenario (:class:`HardwareConfig`: a replica's GPUs and
how they are split), and a GPU it names from the table (``hardware.gpu: h200``) or
describes inline.

An inline GPU is a mapping with :class:`sim.cost.gpus.GPUSpec`'s fields, in the same SI
units (FLOP/s, bytes/s, seconds), plus ``mem_gb`` as another way to give the memory:
docs/scenarios.md shows one. :func:`resolve_gpu` turns either form into the ``GPUSpec``
everything downstream prices with; :func:`gpu_label` gives the name outputs print.
"""

from __future__ import annotations

from dataclasses import dataclass

from sim.configtools import bounded
from sim.cost.gpus import GPUS, GPUSpec, gpu
from sim.cost.pipeline import check_layout
from sim.errors import ServesimError

_GIB = 2**30


# An inline GPU's rates, their units and a real figure of each (an H100 SXM's); below the
# floors no accelerator runs (1 GFLOP/s, 1 MB/s): a figure written in TFLOP/s or GB/s.
RATE_FIELDS = (("flops", "FLOP/s", "989e12"), ("fp8_flops", "FLOP/s", "1979e12"),
               ("fp4_flops", "FLOP/s", "9000e12 on a B200"), ("mem_bw", "bytes/s", "3.35e12"),
               ("link_bw", "bytes/s", "450e9"), ("host_bw", "bytes/s", "55e9"),
               ("net_bw", "bytes/s", "50e9"))
RATE_FLOOR = {"FLOP/s": 1e9, "bytes/s": 1e6}
OPTIONAL_RATES = ("fp8_flops", "fp4_flops")  # 0: no such tensor cores
# The longest link latency (s) a scenario may give. Real links take microseconds (5e-6
# across NVLink, 2e-5 over InfiniBand) and a wide-area hop well under a second; a figure
# past 10 s is one written in micro- or milliseconds, or a slip, and would stall every
# transfer or collective for years of simulated time.
LATENCY_MAX_S = 10.0


def check_latency_s(value: float | None, key: str, example: str) -> None:
    """Refuse a link latency ``value`` (s; None: the default) above
    :data:`LATENCY_MAX_S`, naming ``key`` and a real figure (``example``)."""
    if value is not None and value > LATENCY_MAX_S:
        raise ServesimError(f"got {value:g}; {key} is in seconds (for example {example}), "
                            f"from 0 to {LATENCY_MAX_S:g}", where=key)


@dataclass(frozen=True)
class InlineGPU:
    """A GPU described in the scenario. Required: ``name``, dense ``flops`` (bf16
    FLOP/s), ``mem_bw`` (bytes/s), the memory the device reports to programs as
    ``mem_bytes`` (bytes) or ``mem_gb`` (GiB, 2**30 bytes; exactly one of the two),
    ``link_bw`` (bytes/s each way between GPUs of a node), ``host_bw`` (bytes/s each way
    to host memory) and ``node_gpus`` (GPUs sharing that link).

    Defaults: ``fp8_flops`` and ``fp4_flops`` 0 (no such tensor cores: FP8 weights run
    weight-only at bf16 speed); ``link_latency_s`` 8e-6 s, ``net_bw`` 50e9 bytes/s (one
    400 Gb/s NIC per GPU) and ``net_latency_s`` 20e-6 s, the table's figures for its
    NVLink-class GPUs (its PCIe servers use 20e-6 s over the link: give it for one)."""

    name: str
    flops: float = bounded(gt=0)
    mem_bw: float = bounded(gt=0)
    link_bw: float = bounded(gt=0)
    host_bw: float = bounded(gt=0)
    node_gpus: int = bounded(ge=1)
    mem_bytes: int | None = bounded(None, gt=0, le=2**50)  # up to 1 PiB
    mem_gb: float | None = bounded(None, gt=0, le=2**20)  # GiB, up to 1 PiB
    link_latency_s: float = bounded(8e-6, ge=0)
    net_bw: float = bounded(50e9, gt=0)
    net_latency_s: float = bounded(20e-6, ge=0)
    fp8_flops: float = bounded(0.0, ge=0)
    fp4_flops: float = bounded(0.0, ge=0)

    def __post_init__(self) -> None:
        if not self.name.strip():
            raise ServesimError("got an empty name; an inline GPU needs one", where="name")
        if self.name in GPUS:
            raise ServesimError(f"got {self.name!r}, the name of a GPU of the table; give "
                                f"the inline GPU another name, or write gpu: {self.name}",
                                where="name")
        if (self.mem_bytes is None) == (self.mem_gb is None):
            raise ServesimError("give exactly one of mem_bytes (bytes) or mem_gb (GiB): the "
                                "memory the device reports to programs",
                                where="mem_gb" if self.mem_gb is not None else "mem_bytes")
        check_latency_s(self.link_latency_s, "link_latency_s", "8e-06, NVLink")
        check_latency_s(self.net_latency_s, "net_latency_s", "2e-05, InfiniBand")
        for key, unit, example in RATE_FIELDS:
            value = getattr(self, key)
            if 0 < value < RATE_FLOOR[unit] or value == 0 and key not in OPTIONAL_RATES:
                # Most likely a figure in TFLOP/s or GB/s: the run would crawl silently.
                none = ", or 0 for none" if key in OPTIONAL_RATES else ""
                raise ServesimError(f"got {value:g}; {key} is in {unit} (for example "
                                    f"{example}), at least {RATE_FLOOR[unit]:g}{none}",
                                    where=key)

    @property
    def spec(self) -> GPUSpec:
        """These figures as the :class:`GPUSpec` the cost and memory models read."""
        mem = self.mem_bytes if self.mem_bytes is not None else int(
            (self.mem_gb or 0.0) * _GIB)
        return GPUSpec(self.name, self.flops, self.mem_bw, mem, self.link_bw,
                       self.link_latency_s, self.host_bw, self.node_gpus, self.net_bw,
                       self.net_latency_s, self.fp8_flops, self.fp4_flops)


GPUChoice = str | InlineGPU


def resolve_gpu(choice: GPUChoice) -> GPUSpec:
    """The figures of a table GPU's name or of an inline GPU; an unknown name is an
    error listing the table's."""
    return choice.spec if isinstance(choice, InlineGPU) else gpu(choice)


def gpu_label(choice: GPUChoice) -> str:
    """The GPU's name as outputs print it (a table key or the inline GPU's ``name``)."""
    return choice.name if isinstance(choice, InlineGPU) else choice


def is_inline(choice: GPUChoice) -> bool:
    """Whether the scenario describes this GPU itself (no kernel tables exist for it)."""
    return isinstance(choice, InlineGPU)


DEFAULT_GPU = "h100-sxm"  # hardware.gpu when the scenario names none


@dataclass(frozen=True)
class HardwareConfig:
    """One replica's GPUs: type, tensor-parallel degree ``tp``, pipeline stages ``pp``
    (the replica has ``tp × pp`` GPUs; docs/policies.md, "Pipeline parallelism"), the
    fraction of each GPU's reported memory vLLM may use (``gpu_memory_utilization``; that
    name is accepted in the file too), and the GiB of a node's host memory a KV tier may
    take. ``gpu`` is a name from :data:`sim.cost.gpus.GPUS` or a GPU described inline
    (:class:`sim.config.gpu.InlineGPU`). ``ep`` > 1 is expert parallelism (vLLM's
    ``--enable-expert-parallel``): a mixture of experts' routed experts dealt out whole,
    E/ep to a GPU; it must equal ``tp`` (:func:`sim.cost.shard.expert_shard`).
    ``ep_imbalance`` (at least 1) is how many times the mean share of routed tokens the
    busiest GPU's experts get under expert parallelism (the roofline prices that GPU; 1:
    balanced routing). ``dp`` > 1 is data-parallel attention (vLLM's
    ``--data-parallel-size`` with ``--enable-expert-parallel``): the replica is ``dp``
    ranks of ``tp`` GPUs, each with the whole attention, its own scheduler, batch and KV
    cache, sharing a mixture of experts' routed experts dealt out over all dp × tp GPUs
    (``ep`` = dp × tp), every rank stepping with the others (:mod:`sim.core.dpgroup`)."""

    gpu: str | InlineGPU = DEFAULT_GPU
    tp: int = bounded(1, ge=1)
    # None: the default of the vLLM release that sizes the memory (0.92 from 0.22, 0.9
    # before: sim.cost.vllmmemory).
    memory_utilization: float | None = bounded(None, gt=0, le=1)
    # None: the node's installed memory (sim.cost.gpus.NODE_HOST_MEMORY_GIB); at most
    # 1 PiB, as a host tier per GPU.
    host_memory_gb: float | None = bounded(None, gt=0, le=2**20)
    pp: int = bounded(1, ge=1)
    ep: int = bounded(1, ge=1)
    ep_imbalance: float = bounded(1.0, ge=1)
    dp: int = bounded(1, ge=1)

    def __post_init__(self) -> None:
        if isinstance(self.gpu, str) and self.gpu not in GPUS:
            raise ServesimError(f"unknown gpu {self.gpu!r}; valid: {', '.join(sorted(GPUS))} "
                                "(or a mapping describing the GPU)", where="gpu")
        check_layout(self.gpu_spec, self.tp, self.pp)
        if self.ep_imbalance != 1 and self.ep == 1:
            # Without expert parallelism every GPU holds a share of every expert: an
            # uneven routing loads them alike, and the setting would change nothing.
            raise ServesimError(f"got {self.ep_imbalance:g}: the busiest GPU's share of "
                                "routed tokens applies under expert parallelism (ep > 1)",
                                where="ep_imbalance")
        if self.ep_imbalance > self.ep:
            # All of the routed tokens on one GPU is ep times the mean share, the most
            # there can be.
            raise ServesimError(f"got {self.ep_imbalance:g}: the busiest of ep = {self.ep} "
                                f"GPUs gets at most every routed token, {self.ep} times the "
                                f"mean share; expected 1 to {self.ep}", where="ep_imbalance")

    @property
    def gpu_spec(self) -> GPUSpec:
        """The GPU's figures: the table's entry, or the inline description's."""
        return resolve_gpu(self.gpu)

    @property
    def gpu_name(self) -> str:
        """The GPU's name as outputs print it."""
        return gpu_label(self.gpu)
