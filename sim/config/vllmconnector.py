"""vLLM's ``--kv-transfer-config`` in a scenario's ``vllm`` section: the KV connectors that
keep prefix blocks in host memory become a write-through ``serving.kv_offload`` tier.

Two connectors do that, both copying KV blocks to CPU memory as they are computed and
loading them back for a later request with the same prefix (:mod:`sim.core.hosttier`,
``write_policy: write_through``); how each writes and loads is :data:`NATIVE` and
:data:`LMCACHE_WAY`:

- ``OffloadingConnector``, vLLM's own CPU offloading (what ``--kv-offloading-size`` with
  the ``native`` backend sets up): ``kv_connector_extra_config.cpu_bytes_to_use`` bytes
  of host memory over the tensor-parallel ranks (vLLM divides a block's bytes by the
  world size), so ``cpu_gb`` = bytes / 2^30 / tp per GPU. Releases before the key sized
  the tier in ``num_cpu_blocks``, which needs the model's block bytes: give
  ``cpu_bytes_to_use`` or ``--kv-offloading-size`` instead (an error says so).
- ``LMCacheConnectorV1`` with LMCache's CPU backend: ``lmcache.max_local_cpu_size`` GB
  (GiB) per rank, as ``--kv-offloading-backend lmcache`` passes it, else LMCache's own
  default of 5.0 (its configuration file or ``LMCACHE_*`` environment may say
  otherwise, which a flag set does not show: a note says which size was taken).

Both need ``kv_role: kv_both``. Settings servesim does not price (a CPU block size,
LMCache's chunk size, another eviction policy, LMCache's other switches) are accepted
with a note; tiers below host memory (LMCache's disk or remote backends, vLLM's tiering
spec) are errors.

``NixlConnector`` (``kv_role: kv_both``) sends a request's KV from a prefill server to a
decode server. A flag set holding it is read as both pools' of a scenario that describes
them (``serving.policy: disaggregated`` and its ``disaggregated:`` section), the transfer
priced on that section's link, with a note; without that layout it is an error saying
so, as is every other connector (``P2pNcclConnector``, Mooncake, or a producer or
consumer role, which describe one side of the pair).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from sim.config.vllmnames import OFFLOAD_BACKENDS
from sim.config.vllmspec import json_object
from sim.errors import ServesimError

# How each connector writes and loads (serving.kv_offload's keys). vLLM's copies every
# full block a request computes and loads a hit while the request waits and the others
# run (its scheduler's asynchronous load), which overlapping the load with the step's
# compute stands for; LMCache copies a prompt's KV alone (unless save_decode_cache) and
# loads a hit before the step that needs it.
NATIVE = {"write_policy": "write_through", "store_outputs": True, "overlap": True}
LMCACHE_WAY = {"write_policy": "write_through", "store_outputs": False, "overlap": False}
# The flags that set a host tier (serving.kv_offload).
HOST_TIER_FLAGS = ("kv_offloading_size", "kv_offloading_backend", "kv_transfer_config")

OFFLOADING = "OffloadingConnector"
LMCACHE = "LMCacheConnectorV1"
NIXL = "NixlConnector"
# LMCache's default host cache per worker (GB), lmcache/v1/config.py's max_local_cpu_size.
LMCACHE_DEFAULT_GB = 5.0
# Top-level keys of vLLM's KVTransferConfig that change nothing an offloading connector
# prices: where a P/D connector listens, its buffer, what to do when a load fails.
NO_EFFECT = frozenset(("engine_id", "kv_buffer_device", "kv_buffer_size", "kv_ip",
                       "kv_port", "kv_rank", "kv_parallel_size", "kv_load_failure_policy"))
# LMCache keys that would add a tier below host memory, accepted only when they add none.
LMCACHE_TIERS = {"lmcache.local_disk": (None, ""), "lmcache.max_local_disk_size": (None, 0),
                 "lmcache.remote_url": (None, "")}


def _size(value: Any, what: str, where: str, most: float) -> float:
    """A positive finite number of bytes or GB (``what`` says which) up to ``most`` (1
    PiB in that unit, the bound of ``serving.kv_offload.cpu_gb``), refused otherwise (an
    integer too large for a float too)."""
    try:
        ok = (not isinstance(value, bool) and isinstance(value, int | float)
              and 0 < float(value) <= most)
    except OverflowError:
        ok = False
    if not ok:
        raise ServesimError(f"got {value!r}, expected {what} (a finite number above 0 and "
                            f"at most {int(most):,}, 1 PiB)", where=where)
    return float(value)


def connector_tier(cfg: dict[str, Any], tp: int, where: str
                   ) -> tuple[dict[str, Any], list[str]]:
    """``serving.kv_offload`` (a write-through tier of ``cpu_gb`` GiB per GPU, over ``tp``
    tensor-parallel GPUs) for the ``kv-transfer-config`` flag's mapping ``cfg``, and notes
    on what it leaves unpriced (each to follow the flag's name). Errors name ``where``
    (the flag) and the key."""
    name = cfg.get("kv_connector")
    if name not in (OFFLOADING, LMCACHE):
        raise ServesimError(f"got connector {name!r}: servesim models the host-memory KV "
                            f"connectors {OFFLOADING} and {LMCACHE} (a write-through "
                            f"serving.kv_offload tier), and {NIXL} as the transfer of "
                            "serving.policy: disaggregated (prefill and decode on pools of "
                            "their own)", where=f"{where}.kv_connector")
    if cfg.get("kv_role") != "kv_both":
        raise ServesimError(f"got {cfg.get('kv_role')!r}: {name} keeps KV in host memory "
                            "with kv_role kv_both; a producer or consumer role sends KV "
                            "between prefill and decode servers (serving.policy: "
                            "disaggregated)", where=f"{where}.kv_role")
    extra = _extra_config(cfg, where)
    at = f"{where}.kv_connector_extra_config"
    if name == OFFLOADING:
        return _offloading(extra, tp, at)
    return _lmcache(extra, at)


def _extra_config(cfg: dict[str, Any], where: str) -> dict[str, Any]:
    """The connector's ``kv_connector_extra_config`` (empty when not given: its defaults),
    after refusing a key of ``cfg`` servesim neither reads nor knows to change nothing."""
    for key in cfg:
        if key not in ("kv_connector", "kv_role", "kv_connector_extra_config", *NO_EFFECT):
            raise ServesimError(f"unknown or not modelled key {key!r}; understood: "
                                f"kv_connector, kv_role, kv_connector_extra_config, "
                                f"{', '.join(sorted(NO_EFFECT))}", where=f"{where}.{key}")
    extra = cfg.get("kv_connector_extra_config")
    if extra is None:  # not given: the connector's defaults
        return {}
    if not isinstance(extra, dict):  # an empty list too, which had read as no size
        raise ServesimError(f"got {extra!r}, expected a mapping",
                            where=f"{where}.kv_connector_extra_config")
    return extra


def _offloading(extra: dict[str, Any], tp: int, where: str
                ) -> tuple[dict[str, Any], list[str]]:
    """vLLM's OffloadingConnector: its CPU spec's size and settings."""
    spec = extra.get("spec_name", "CPUOffloadingSpec")
    if spec != "CPUOffloadingSpec":
        raise ServesimError(f"got {spec!r}: servesim models host memory alone "
                            "(CPUOffloadingSpec), not tiers below it",
                            where=f"{where}.spec_name")
    if "cpu_bytes_to_use" not in extra:
        hint = (" (num_cpu_blocks, an older release's size, needs the model's block bytes)"
                if "num_cpu_blocks" in extra else "")
        raise ServesimError(f"gives no cpu_bytes_to_use{hint}; give the host memory in "
                            "bytes, or use --kv-offloading-size GiB", where=where)
    total = _size(extra["cpu_bytes_to_use"], "bytes", f"{where}.cpu_bytes_to_use",
                  2**50)
    policy = extra.get("eviction_policy", "lru")
    if policy not in ("lru", "arc"):
        raise ServesimError(f"got {policy!r}; vLLM's CPU offloading evicts by lru or arc",
                            where=f"{where}.eviction_policy")
    notes = []
    for key, v in extra.items():
        if key in ("cpu_bytes_to_use", "spec_name") or (key, v) == ("eviction_policy", "lru"):
            continue
        notes.append(f"{key} ({v!r}) is not priced: the host tier moves whole KV blocks "
                     "and drops its least recently used entry")
    return {"cpu_gb": total / 2**30 / tp, **NATIVE}, notes


def _lmcache(extra: dict[str, Any], where: str) -> tuple[dict[str, Any], list[str]]:
    """LMCache's connector: its CPU backend's size per rank and settings."""
    if extra.get("lmcache.local_cpu", True) is not True:
        raise ServesimError(f"got {extra['lmcache.local_cpu']!r}: servesim models LMCache's "
                            "host-memory backend (lmcache.local_cpu: true), not the disk "
                            "or remote ones alone", where=f"{where}.lmcache.local_cpu")
    for key, unset in LMCACHE_TIERS.items():
        if key in extra and extra[key] not in unset:
            raise ServesimError(f"got {extra[key]!r}: a tier below host memory is not "
                                "modelled; servesim models LMCache's CPU backend",
                                where=f"{where}.{key}")
    notes = []
    if "lmcache.max_local_cpu_size" in extra:
        gb = _size(extra["lmcache.max_local_cpu_size"], "GB a rank",
                   f"{where}.lmcache.max_local_cpu_size", 2**20)
    else:
        gb = LMCACHE_DEFAULT_GB
        notes.append(f"no lmcache.max_local_cpu_size: the host tier is LMCache's default, "
                     f"{gb:g} GB a GPU (its config file or environment may set another; "
                     "give the key to say which)")
    outputs = extra.get("lmcache.save_decode_cache", False)
    if not isinstance(outputs, bool):
        raise ServesimError(f"got {outputs!r}, expected true or false",
                            where=f"{where}.lmcache.save_decode_cache")
    for key, v in extra.items():
        if key in ("lmcache.local_cpu", "lmcache.max_local_cpu_size",
                   "lmcache.save_decode_cache", *LMCACHE_TIERS):
            continue
        notes.append(f"{key} ({v!r}) is not priced: the host tier moves whole KV blocks, "
                     "copied as a prompt is computed")
    return {"cpu_gb": gb, **LMCACHE_WAY, "store_outputs": outputs}, notes


def host_tier_flag(name: str, flag: str, value: Any, given: dict[str, tuple[str, Any]],
                   section: Callable[[str], dict[str, Any]], notes: list[str]) -> None:
    """Move a flag of :data:`HOST_TIER_FLAGS` (``name``, spelt ``flag``) into
    ``serving.kv_offload`` (of the mapping ``section("serving")``), adding a line to
    ``notes`` for each setting it leaves unpriced; ``given``: every flag, by name."""
    where = f"vllm.{flag}"
    if name != "kv_transfer_config":
        _offload(name, value, given, section, where)
        if name == "kv_offloading_backend" and given.get("kv_offloading_size",
                                                         ("", None))[1] is None:
            notes.append(f"{where}: without kv-offloading-size it sets no host tier up (as "
                         "vLLM's earlier releases; newer ones refuse it)")
    elif value is not None:
        if "kv_offloading_size" in given:
            raise ServesimError("kv-offloading-size sets the connector up too; give one of "
                                "them", where=where)
        cfg = json_object(value, where, "kv_connector and kv_role")
        if cfg.get("kv_connector") == NIXL:
            notes.append(f"{where}: {nixl_transfer(cfg, section('serving'), where)}")
            return
        tier, more = connector_tier(cfg, _tp(given, section), where)
        _set_tier(section("serving"), tier, where)
        notes.extend(f"{where}: {n}" for n in more)


def nixl_transfer(cfg: dict[str, Any], serving: dict[str, Any], where: str) -> str:
    """The note for a ``kv-transfer-config`` mapping ``cfg`` of :data:`NIXL`: the
    prefill-to-decode transfer of the scenario's disaggregated layout (``serving``: the
    scenario's section, whose policy must be ``disaggregated``), priced on its link;
    errors name ``where`` (the flag) and the key."""
    if serving.get("policy") != "disaggregated":
        raise ServesimError(f"got connector {NIXL!r}, which sends each request's KV from a "
                            "prefill server to a decode server: describe the pair as "
                            "serving.policy: disaggregated with its disaggregated: section "
                            "(the pools and their link), whose transfer the flag is then "
                            "read as", where=f"{where}.kv_connector")
    if cfg.get("kv_role") != "kv_both":
        raise ServesimError(f"got {cfg.get('kv_role')!r}: the flags stand for both pools' "
                            f"servers, and {NIXL} runs them with kv_role kv_both",
                            where=f"{where}.kv_role")
    extra = _extra_config(cfg, where)
    unpriced = sorted({*extra, *(k for k in cfg if k in NO_EFFECT)})
    return (f"{NIXL}: the prefill-to-decode KV transfer of serving.policy disaggregated, "
            "priced on disaggregated.link" + (f"; not priced: {', '.join(unpriced)}"
                                               if unpriced else ""))


def _offload(name: str, value: Any, given: dict[str, tuple[str, Any]],
             section: Callable[[str], dict[str, Any]], where: str) -> None:
    """``kv-offloading-size`` (GiB in all, over the tensor-parallel ranks) and
    ``kv-offloading-backend``: a host KV tier, ``serving.kv_offload`` with ``cpu_gb``
    per GPU. The backend alone turns nothing on, as in vLLM's earlier releases."""
    if name == "kv_offloading_backend":
        if value not in OFFLOAD_BACKENDS:
            raise ServesimError(f"got {value!r}; vLLM's backends are "
                                f"{', '.join(OFFLOAD_BACKENDS)}", where=where)
        return
    if value is None:
        return
    value = _size(value, "GiB", where, 2**20)
    backend = given.get("kv_offloading_backend", ("", "native"))[1]
    way = LMCACHE_WAY if backend == "lmcache" else NATIVE
    _set_tier(section("serving"), {"cpu_gb": value / _tp(given, section), **way}, where)


def _tp(given: dict[str, tuple[str, Any]], section: Callable[[str], dict[str, Any]]) -> int:
    """The tensor-parallel GPUs a host tier's total is spread over (1 when the flag's or
    the scenario's value is not a count: its own validation names it)."""
    tp = given.get("tensor_parallel_size", ("", section("hardware").get("tp", 1)))[1]
    return tp if isinstance(tp, int) and not isinstance(tp, bool) and tp >= 1 else 1


def _set_tier(serving: dict[str, Any], tier: dict[str, Any], where: str) -> None:
    """Give ``serving`` the host tier a flag sets, unless the scenario sets one too."""
    if "kv_offload" in serving:
        raise ServesimError("sets serving.kv_offload, which the scenario sets too; give one "
                            "of them", where=where)
    serving["kv_offload"] = tier
