"""Notes for a run's summary on settings that load without error but change nothing, or
less than they appear to: a ``faults`` section that injects no fault (or keys of one
that cannot act on the faults it injects), priorities that no scheduler reads, a shared
prefix that is not a whole number of blocks, a profile file's vLLM release outside
those whose memory rules servesim models, and a ``num_gpu_blocks`` past what
``memory_utilization`` leaves for the KV cache. Each note leaves every simulated number
as it was; it only says what the run did with the setting."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from sim.config.disagg import blocks_override_note, memory_version, pools, profile_vllm_source
from sim.cost.vllmmemory import FIRST, LAST, modelled_release

if TYPE_CHECKING:
    from sim.config.scenario import Scenario


def settings_notes(scenario: Scenario, raw: dict[str, Any]) -> tuple[str, ...]:
    """The notes of :mod:`this module <sim.config.loadnotes>` that apply to the validated
    ``scenario``; ``raw`` is the mapping it was loaded from (overrides applied), read to
    tell a section the file wrote from one left at its defaults."""
    found = (_faults_note(scenario, raw.get("faults")),
             *_idle_fault_keys(scenario, raw.get("faults")), _priority_note(scenario),
             _prefix_note(scenario), _profile_version_note(scenario), _mode_note(scenario),
             _affinity_note(scenario),
             *(blocks_override_note(scenario, pool) for pool in pools(scenario)))
    return tuple(note for note in found if note is not None)


def _mode_note(scenario: Scenario) -> str | None:
    """vLLM's interactivity mode, whose finer CUDA-graph capture is not priced."""
    if scenario.serving.performance_mode != "interactivity":
        return None
    return ("serving.performance_mode: interactivity captures CUDA graphs at finer batch "
            "sizes, which is not priced: steps cost what vLLM's default kernels take")


def _faults_note(scenario: Scenario, given: Any) -> str | None:
    """A written ``faults`` section with no outage and no failure rate: its retry and
    repair settings act only on a failure, and none happens."""
    if not isinstance(given, dict) or scenario.faults.active:  # {} written is noted too
        return None
    idle = sorted(str(k) for k in given if k not in ("outages", "failures_per_hour"))
    return ("faults: injects no fault (no outages, failures_per_hour "
            f"{scenario.faults.failures_per_hour:g})"
            + (f"; {', '.join(idle)} act only when a replica fails" if idle else "")
            + "; add outages or a failures_per_hour above 0 to inject some")


def _idle_fault_keys(scenario: Scenario, given: Any) -> list[str]:
    """Keys of a written ``faults`` section that injects faults yet cannot act on them:
    ``max_retries`` under ``on_failure: fail`` (nothing is retried), ``repair_s``
    without random failures (a planned outage lasts its own ``duration_s``)."""
    faults = scenario.faults
    if not isinstance(given, dict) or not faults.active:
        return []
    out = []
    if "max_retries" in given and faults.on_failure == "fail":
        out.append(f"faults.max_retries: {faults.max_retries} is not used: it bounds the "
                   "retries of on_failure: retry, and under fail a lost request fails at once")
    if "repair_s" in given and faults.failures_per_hour == 0:
        out.append(f"faults.repair_s: {faults.repair_s:g} s is not used: it is how long a "
                   "random failure (failures_per_hour) lasts, and each planned outage "
                   "lasts its own duration_s")
    return out


def _priority_note(scenario: Scenario) -> str | None:
    """Priorities the workload draws while the replicas admit in arrival order, or
    admission by priority with no priority to read."""
    wl = scenario.workload
    keys = (["workload.priority"] if wl.priority is not None else []) + [
        f"workload.classes.{name}.priority" for name, c in (wl.classes or {}).items()
        if c.priority is not None]
    if scenario.serving.priority:
        if keys or wl.trace is not None:  # a trace may carry a priority column
            return None
        return ("serving.priority: true, but the workload gives no priorities "
                "(workload.priority, a class's priority, or a trace's priority column): "
                "every request has priority 0, so admission stays in arrival order")
    if not keys:
        return None
    return (f"{', '.join(keys)}: priorities are drawn but not used, as requests are "
            "admitted in arrival order; set serving.priority: true to admit by priority")


def _affinity_note(scenario: Scenario) -> str | None:
    """A prefix-affinity router with no prefix cache to read: it routes by load alone."""
    if scenario.cluster.router != "prefix_affinity" or scenario.serving.caches_prefixes:
        return None
    return ("cluster.router: prefix_affinity finds no prefix cache (prefix caching is off), "
            "so it routes each request to the replica with the fewest outstanding tokens, "
            "as least_outstanding does")


def _prefix_note(scenario: Scenario) -> str | None:
    """A shared prefix whose last tokens fall short of a whole block: vLLM hashes full
    blocks only, so those tokens are never shared (the run simulates exactly that)."""
    sp = scenario.workload.shared_prefix
    # Without a tier that caches prefixes, the note on unused hashes says more.
    if sp is None or sp.tokens % sp.block_tokens == 0 or not scenario.serving.caches_prefixes:
        return None
    return (f"workload.shared_prefix: tokens {sp.tokens} is not a multiple of block_tokens "
            f"{sp.block_tokens}: a group shares its first {sp.shared_tokens} prompt tokens "
            f"({sp.shared_tokens // sp.block_tokens} whole blocks), as only full blocks "
            "are hashed")


def _release(version: tuple[int, int]) -> str:
    """A (major, minor) release as written: ``0.11``."""
    return f"{version[0]}.{version[1]}"


def _profile_version_note(scenario: Scenario) -> str | None:
    """A vLLM profile file whose ``source.version`` is missing or outside the releases
    whose memory rules servesim models, while the KV cache is sized from those rules
    (no ``serving.vllm_version``, some pool without ``num_gpu_blocks``): say which
    release's rules were used instead."""
    ref = scenario.cost.profile
    if ref is None or scenario.serving.vllm_version is not None:
        return None
    base = None if scenario.base_dir is None else str(scenario.base_dir)
    src = profile_vllm_source(ref, base)
    if src is None or modelled_release(str(src.get("version"))) is not None:
        return None
    sized = [p for p in pools(scenario) if p.serving.num_gpu_blocks is None]
    if not sized:
        return None
    version = src.get("version")
    said = ("gives no source.version, so it names none of" if version is None
            else f"gives source.version {version!r}, outside")
    return (f"cost.profile: {ref} {said} the vLLM releases whose memory rules servesim "
            f"models ({_release(FIRST)} to {_release(LAST)}); the KV cache is sized as vLLM "
            f"{memory_version(scenario, sized[0].gpu)} sizes it (set serving.vllm_version "
            "to choose the release, or serving.num_gpu_blocks)")
