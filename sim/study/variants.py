"""What ``servesim compare`` runs: one scenario several times, each run with a few keys
changed — its policy (``--policies``), its GPU and tensor-parallel degree (``--gpus``), or
any keys a user names (``--variant NAME KEY=VALUE ...``: a layout of tp, dp and ep, a
setting of speculative decoding, a memory limit).

Every variant is the scenario file with the ``--set`` overrides first and the variant's
own settings after them; a variant may not set a key an override sets (the override
would be silently lost), and every variant is loaded before any runs, so a bad one is
refused before minutes of simulation.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sim.config.flagaxes import POLICY_OWN_KEYS, policy_setting
from sim.config.flagaxes import axis_key as _axis_key
from sim.config.overrides import override_sets
from sim.errors import ServesimError

T = TypeVar("T")

# A variant's name: a table cell, a CSV cell and a legend entry, so short and plain.
NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:+@/-]{0,39}")


def gpus(scenario: Any) -> int:
    """GPUs the scenario's cluster uses (replicas x tp x pp over its pools)."""
    from sim.config.disagg import pools

    return sum(p.replicas * p.gpus_per_replica for p in pools(scenario))


def run_variants(path: str | Path, variants: dict[str, list[str]],
                 overrides: list[str] | None = None,
                 percentiles: tuple[float, ...] | None = None, force: bool = False,
                 flag: str = "--policies", replaceable: frozenset[str] = frozenset(),
                 ) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per variant, its ``KEY=VALUE`` settings applied
    after the ``overrides`` (:func:`variant_overrides`; ``flag`` names the option the
    variants come from, ``replaceable`` the keys a variant may take over from an
    override), all loaded before any runs (:func:`run_loaded`)."""
    from sim.config import scenario

    return run_loaded({label: scenario.load(path, variant_overrides(overrides or [], settings,
                                                                     flag, replaceable))
                        for label, settings in variants.items()}, percentiles, force,
                      {"--policies": "policy", "--gpus": "GPU"}.get(flag, "variant"))


def run_loaded(loaded: dict[str, Any], percentiles: tuple[float, ...] | None,
                force: bool, what: str = "variant") -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run each loaded scenario, its memory estimate checked first (``force``: not
    refused): {label: (RunResult, summary)}, ``percentiles`` those of each summary's
    latencies (default: the summary's own). An error names the run's label, as ``what``
    (a variant, a policy, a GPU) it is."""
    from sim.core.budget import check
    from sim.core.engine import simulate
    from sim.report.metrics import PERCENTILES
    from sim.report.summary import summarize

    for label, sc in loaded.items():
        named(what, label, check, sc, force)  # every memory estimate before any run
    out = {}
    for label, sc in loaded.items():
        res = named(what, label, simulate, sc)  # which one's cost model refused it, say
        summary = summarize(res, percentiles or PERCENTILES)
        summary["gpus"] = gpus(sc)
        out[label] = (res, summary)
    return out


def named(what: str, label: str, fn: Callable[..., T], *args: Any) -> T:
    """``fn(*args)``, an error it raises prefixed with the run it was for (``what`` it is:
    a variant, a policy, a GPU; and its ``label``)."""
    try:
        return fn(*args)
    except ServesimError as exc:
        raise ServesimError(f"{what} {label}: {exc.message}", exc.source, exc.where) from None


def variant_overrides(overrides: list[str], settings: list[str], flag: str,
                      replaceable: frozenset[str] = frozenset()) -> list[str]:
    """The ``--set`` ``overrides``, then one variant's ``settings`` (from ``flag``): a key
    in ``replaceable`` the variant sets replaces the override's (``--gpus h100-sxm:8``
    runs tp 8 whatever ``--set hardware.tp`` says); another it sets, or one inside it,
    is refused in an override, as the variant would drop it."""
    keys = [s.split("=", 1)[0].strip() for s in settings]
    kept = []
    for o in overrides:
        key = o.split("=", 1)[0].strip()
        if key in keys and key in replaceable:
            continue
        if key in keys:
            raise ServesimError(f"--set {o}: {flag} sets {key} for each run; leave it out"
                                if flag != "--variant" else
                                f"--set {o}: the variant sets {key} itself, and the override "
                                "would be lost in its run; set it in each variant instead",
                                where=flag)
        inside = next((k for k in keys if key.startswith(k + ".")), None)
        if inside is not None:
            raise ServesimError(f"--set {o} sets a key inside {inside}, which {flag} "
                                "replaces whole in each run, so it would be dropped; leave "
                                "it out", where=flag)
        # The mapping form sets the varied key as the dotted one does, and is lost alike.
        above = next((k for k in keys if k not in replaceable and k.startswith(key + ".")
                      and override_sets(o, k)), None)
        if above is not None:
            who = "the variant" if flag == "--variant" else flag
            raise ServesimError(f"--set {o} sets {above} in the mapping it gives {key}, and "
                                f"{who} sets {above} for each run, so it would be lost; "
                                f"leave {above} out of the mapping", where=flag)
        kept.append(o)
    return [*kept, *settings]


def run_policies(path: str | Path, policies: list[str], overrides: list[str] | None = None,
                 percentiles: tuple[float, ...] | None = None, force: bool = False,
                 ) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per policy: {policy: (RunResult, summary)}, as
    :func:`run_variants` of ``serving.policy``; an unknown name lists the valid ones."""
    from sim.policies.registry import POLICIES

    if len(set(policies)) < len(policies):
        raise ServesimError(f"got {','.join(policies)!r}: each policy once", where="--policies")
    unknown = [p for p in policies if p not in POLICIES]
    if unknown or not policies:
        raise ServesimError(f"unknown policy {unknown[0] if unknown else ''!r}; valid: "
                            f"{', '.join(sorted(POLICIES))}", where="--policies")
    from sim.config.scenario import load_raw

    raw = load_raw(path, overrides)
    try:
        sets = {p: policy_setting(raw, p) for p in policies}
    except ServesimError as exc:
        raise exc.located(str(path)) from None
    return run_variants(path, sets, overrides,
                        percentiles, force, "--policies", POLICY_OWN_KEYS)


def gpu_variants(names: list[str], raw: Any) -> dict[str, list[str]]:
    """Each ``GPU`` of the table or ``GPU:TP`` of ``--gpus`` as the settings of its run
    (``hardware.gpu``, and the tp where the scenario ``raw`` gives it when a degree is
    given: ``hardware.tp``, or a pasted vLLM flag); an unknown GPU, a bad degree or a
    repeated name is refused in one line."""
    from sim.cost.gpus import GPUS

    tp_key = _axis_key(raw, "tp")
    if not names:
        raise ServesimError(f"got no GPU; give one or more of {', '.join(sorted(GPUS))}",
                            where="--gpus")
    if len(set(names)) < len(names):
        raise ServesimError(f"got {','.join(names)!r}: each GPU once", where="--gpus")
    variants = {}
    for name in names:
        gpu, colon, tp = name.partition(":")
        if gpu not in GPUS:
            raise ServesimError(f"unknown gpu {gpu!r}; valid: {', '.join(sorted(GPUS))}",
                                where="--gpus")
        # ASCII digits alone: isdigit() and int() take other scripts' (Arabic-Indic 2).
        if colon and not (tp.isascii() and tp.isdigit() and int(tp) >= 1):
            raise ServesimError(f"got {name!r}: after a GPU, ':' takes its tensor-parallel "
                                "degree, a whole number from 1 (e.g. h100-sxm:2)",
                                where="--gpus")
        variants[name] = [f"hardware.gpu={gpu}", *([f"{tp_key}={int(tp)}"] if tp else [])]
    return variants


def run_gpus(path: str | Path, names: list[str], overrides: list[str] | None = None,
             percentiles: tuple[float, ...] | None = None, force: bool = False,
             ) -> dict[str, tuple[Any, dict[str, Any]]]:
    """Run the scenario at ``path`` once per ``GPU`` of the table or ``GPU:TP`` (its
    tensor-parallel degree too), setting ``hardware.gpu`` (and the tp): {name:
    (RunResult, summary)}. Each configuration is loaded before any runs (the scenario's
    own GPU and tp need not fit: ``h100-sxm:4`` for a 70B model in a scenario of one
    GPU); two names that run the same GPU at the same tp are refused."""
    from sim.config import scenario
    from sim.study.studyargs import refuse_pinned

    raw = scenario.load_raw(path, overrides)
    variants = gpu_variants(names, raw)
    tp = frozenset((_axis_key(raw, "tp"),))
    loaded = {name: scenario.load(path, variant_overrides(overrides or [], sets, "--gpus", tp))
              for name, sets in variants.items()}
    # h100-sxm and h100-sxm:1 are one configuration when the scenario's tp is 1.
    seen: dict[tuple[str, int], str] = {}
    for name, sc in loaded.items():
        key = (name.partition(":")[0], sc.hardware.tp)
        if key in seen:
            raise ServesimError(f"got {seen[key]!r} and {name!r}: both run {key[0]} at tp "
                                f"{key[1]}; each configuration once", where="--gpus")
        seen[key] = name
    sc = next(iter(loaded.values()))
    if sc.serving.policy == "disaggregated":
        # Each GPU's run would otherwise be the same pools under another name.
        tps = ",".join(n.partition(":")[2] for n in names if ":" in n)
        refuse_pinned(sc, "--gpus", ",".join(names), "gpu")
        refuse_pinned(sc, "--gpus", tps, "tp")
    return run_loaded(loaded, percentiles, force, "GPU")


def runnable(path: str, overrides: list[str] | None, policies: list[str]) -> list[str]:
    """Those of ``policies`` the scenario at ``path`` accepts; each one left out is named
    on stderr with the reason; none accepted is the first one's error."""
    from sim.config import scenario

    ok: list[str] = []
    first: ServesimError | None = None
    raw = scenario.load_raw(path, overrides)
    for p in policies:
        try:
            scenario.load(path, [*(overrides or []), *policy_setting(raw, p)])
        except ServesimError as exc:
            first = first or exc
            print(f"compare: left out {p}: {exc.message}", file=sys.stderr)
        else:
            ok.append(p)
    if not ok and first is not None:
        raise first
    return ok


def named_variants(items: list[list[str]]) -> dict[str, list[str]]:
    """``--variant NAME [KEY=VALUE ...]``, given once per variant (``items``, each as
    argparse collected it), as {name: settings}; a variant with no setting is the scenario
    as it is. A bad name, a setting without ``=``, a key set twice in one variant, a
    workload key (every variant runs the same requests) or a name used twice is refused in
    one line."""
    out: dict[str, list[str]] = {}
    for name, *settings in items:
        if "=" in name or not NAME.fullmatch(name):
            raise ServesimError(
                f"got {name!r} first: a variant starts with its name (up to 40 letters, "
                "digits or ._:+@/- , not starting with a symbol), then the KEY=VALUE "
                "settings that make it, e.g. --variant tp2 hardware.tp=2", where="--variant")
        if name in out:
            raise ServesimError(f"got the name {name!r} twice: each variant once",
                                where="--variant")
        keys: set[str] = set()
        for s in settings:
            key = s.split("=", 1)[0].strip()
            if "=" not in s or not key:
                raise ServesimError(f"variant {name}: got {s!r}; a setting is KEY=VALUE "
                                    "(a dotted scenario key, e.g. hardware.tp=2)",
                                    where="--variant")
            if key in keys:
                raise ServesimError(f"variant {name}: sets {key} twice", where="--variant")
            if key.split(".")[0] in ("workload", "horizon_s"):
                # Every run of a comparison serves the same requests.
                raise ServesimError(f"variant {name}: sets {key}; a comparison runs every "
                                    "variant on the same requests, so its workload is the "
                                    "scenario's (set it for all with --set; compare loads "
                                    "with servesim sweep)", where="--variant")
            keys.add(key)
        out[name] = settings
    return out


def load_named(path: str | Path, variants: dict[str, list[str]],
               overrides: list[str] | None = None) -> dict[str, Any]:
    """The scenario at ``path`` as each named variant (:func:`named_variants`) runs it, its
    settings applied after the ``overrides``: {name: Scenario}, every one loaded before
    any runs (:func:`run_loaded`). One the scenario refuses is named in the error, and two
    that come out as the same scenario are refused (the comparison would show a
    difference of nothing)."""
    from sim.config import scenario

    # The settings are checked inside: their errors name the variant too.
    loaded = {name: named("variant", name, lambda s=settings: scenario.load(
        path, variant_overrides(overrides or [], s, "--variant")))
        for name, settings in variants.items()}
    seen: list[tuple[Any, str]] = []
    for name, sc in loaded.items():
        same = _as_run(sc)
        earlier = next((n for s, n in seen if s == same), None)
        if earlier is not None:
            given = dataclasses.replace(loaded[earlier], overrides=()) != \
                dataclasses.replace(sc, overrides=())
            pins = _pinned_keys(sc)
            why = (f": the disaggregated pools set their own {', '.join(pins)}, which the "
                   "scenario's do not reach" if given and pins else "")
            raise ServesimError(f"variants {earlier} and {name} run the same scenario "
                                f"({' '.join(variants[earlier]) or 'no setting'} against "
                                f"{' '.join(variants[name]) or 'no setting'}){why}; make "
                                "each one differ", where="--variant")
        seen.append((same, name))
    return loaded


def _pinned_keys(sc: Any) -> list[str]:
    """The scenario's own keys (tp, gpu, replicas) that both disaggregated pools set for
    themselves, so that they reach neither; none outside a disaggregated layout."""
    if sc.serving.policy != "disaggregated":
        return []
    return [k for k in ("tp", "gpu", "replicas") if sc.disaggregated.pinned(k) is not None]


def _as_run(sc: Any) -> Any:
    """``sc`` as it runs, for telling variants apart: without its ``--set`` record, and
    under a disaggregated layout without the scenario's tp, GPU or replica count where
    both pools set their own (they reach no pool, so variants of them run alike)."""
    from sim.config.gpu import DEFAULT_GPU

    same = dataclasses.replace(sc, overrides=())
    if sc.serving.policy != "disaggregated":
        return same
    pins = _pinned_keys(sc)
    hw = dataclasses.replace(same.hardware, **{k: v for k, v in (("tp", 1), ("gpu", DEFAULT_GPU))
                                               if k in pins})
    cl = dataclasses.replace(same.cluster, replicas=1) if "replicas" in pins else same.cluster
    return dataclasses.replace(same, hardware=hw, cluster=cl, notes=())
