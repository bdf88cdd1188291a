"""Settings a fuzzing pass (2026-12, findings 4, 6 and 9) found accepted with no effect and
no word: a shared prefix shorter than one block, a ``faults`` section with nothing to
inject, priorities drawn while admission ignores them, duplicated priority classes, and a
profile file's vLLM release outside the modelled ones. Each is now refused naming its key,
or said in a ``note`` line of the summary while every simulated number stays as it was."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.cli import main
from sim.config.disagg import pools
from sim.config.scenario import Scenario, from_dict, load
from sim.core.engine import simulate
from sim.cost.profilefile import PROFILE_DIR
from sim.cost.vllmmemory import DEFAULT_VERSION, FIRST, LAST
from sim.errors import ServesimError

FIXED = {"dist": "fixed", "value": 40}
WORKLOAD: dict[str, Any] = {"arrivals": {"process": "poisson", "rate": 20.0},
                            "num_requests": 12, "seed": 1,
                            "lengths": {"prompt": dict(FIXED), "output": {"dist": "fixed",
                                                                          "value": 4}}}
TINY: dict[str, Any] = {"name": "tiny", "model": "tiny",
                        "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
                        "serving": {"block_size": 4}, "workload": WORKLOAD}


def scenario(workload: dict[str, Any] | None = None, **top: Any) -> dict[str, Any]:
    """The tiny scenario with ``workload`` keys and top-level sections changed."""
    raw = copy.deepcopy({**TINY, **top})
    raw["workload"].update(copy.deepcopy(workload or {}))
    return raw


def notes(raw: dict[str, Any]) -> tuple[str, ...]:
    return from_dict(raw, "s.yaml").notes


def refused(raw: dict[str, Any]) -> ServesimError:
    with pytest.raises(ServesimError) as info:
        from_dict(raw, "s.yaml")
    return info.value


def printed(raw: dict[str, Any], tmp: Path, capsys: pytest.CaptureFixture[str]) -> str:
    """The summary ``simulate`` prints for ``raw``."""
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert main(["simulate", str(path), "--out", str(tmp / "out"), "--no-plots"]) == 0
    return capsys.readouterr().out


def same_run(a: Scenario, b: Scenario) -> None:
    """Two scenarios that differ in their notes only simulate the same requests."""
    ra, rb = simulate(a), simulate(b)
    assert ra.finish.tolist() == rb.finish.tolist()
    assert ra.first_token.tolist() == rb.first_token.tolist()


# 4: workload.shared_prefix


def test_a_shared_prefix_shorter_than_one_block_is_refused_naming_block_tokens() -> None:
    err = refused(scenario({"shared_prefix": {"tokens": 8, "groups": 2, "block_tokens": 16}}))
    assert err.where == "workload.shared_prefix.block_tokens"
    assert "got 16, more than tokens (8)" in err.message and "at most 8" in err.message
    from_dict(scenario({"shared_prefix": {"tokens": 16, "groups": 2, "block_tokens": 16}}))


def test_a_shared_prefix_off_whole_blocks_says_how_much_is_shared(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = scenario({"shared_prefix": {"tokens": 14, "groups": 2, "block_tokens": 4}})
    said = ("workload.shared_prefix: tokens 14 is not a multiple of block_tokens 4: a group "
            "shares its first 12 prompt tokens (3 whole blocks)")
    assert any(n.startswith(said) for n in notes(raw))
    assert f"note: {said}" in printed(raw, tmp_path, capsys)
    whole = scenario({"shared_prefix": {"tokens": 12, "groups": 2, "block_tokens": 4}})
    assert not any("shared_prefix" in n for n in notes(whole))
    # 14 tokens hash as the 12 of whole blocks: the same run.
    same_run(from_dict(raw), from_dict(whole))
    # With no tier caching prefixes, the note on unused hashes stands alone.
    off = {**raw, "serving": {**raw.get("serving", {}), "prefix_caching": False}}
    assert not any("shared_prefix" in n for n in notes(off))


# 9: sections that change nothing


def test_a_faults_section_with_nothing_to_inject_gets_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    raw = scenario(faults={"repair_s": 600, "on_failure": "fail", "max_retries": 0})
    said = ("faults: injects no fault (no outages, failures_per_hour 0); max_retries, "
            "on_failure, repair_s act only when a replica fails")
    assert any(n.startswith(said) for n in notes(raw))
    assert f"note: {said}" in printed(raw, tmp_path, capsys)
    same_run(from_dict(raw), from_dict(scenario()))
    assert not any(n.startswith("faults:") for n in notes(scenario()))
    active = scenario(faults={"outages": [{"replica": 0, "at_s": 0.1, "duration_s": 0.1}],
                              "repair_s": 600})
    assert not any(n.startswith("faults:") for n in notes(active))


@pytest.mark.parametrize(("workload", "keys"), [
    ({"priority": {"classes": [0, 1], "weights": [1, 1]}}, "workload.priority"),
    ({"arrivals": None, "classes": {
        "a": {"priority": 0, "arrivals": {"process": "poisson", "rate": 5.0}},
        "b": {"arrivals": {"process": "poisson", "rate": 5.0}}}},
     "workload.classes.a.priority"),
])
def test_priorities_no_scheduler_reads_get_a_note(workload: dict[str, Any], keys: str,
                                                 tmp_path: Path,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    raw = scenario(workload)
    if workload.get("arrivals", "") is None:
        del raw["workload"]["arrivals"]
    said = (f"{keys}: priorities are drawn but not used, as requests are admitted in "
            "arrival order; set serving.priority: true to admit by priority")
    assert said in notes(raw)
    assert f"note: {said}" in printed(raw, tmp_path, capsys)
    raw["serving"]["priority"] = True
    assert not any("priorit" in n for n in notes(raw))


def test_admission_by_priority_with_no_priority_to_read_gets_a_note(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    # It changed nothing without a word: every request had priority 0.
    raw = scenario({})
    raw["serving"]["priority"] = True
    said = ("serving.priority: true, but the workload gives no priorities (workload.priority, "
            "a class's priority, or a trace's priority column): every request has priority "
            "0, so admission stays in arrival order")
    assert said in notes(raw)
    assert f"note: {said}" in printed(raw, tmp_path, capsys)


def test_a_priority_class_listed_twice_is_refused() -> None:
    err = refused(scenario({"priority": {"classes": [0, 1, 0], "weights": [1, 1, 1]}}))
    assert err.where == "workload.priority.classes"
    assert "got [0, 1, 0]: class 0 is listed twice" in err.message


# 6: a profile file's source.version


def profile_at(tmp: Path, version: Any) -> Path:
    """The shipped H100 Llama-3-8B vLLM profile with its ``source.version`` replaced
    (None: removed), and the phrase naming it, as a profile built from that release's
    tables would (a phrase naming another release is refused at load)."""
    data = yaml.safe_load((PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text())
    if version is None:
        del data["source"]["version"]
    else:
        data["source"]["version"] = version
        data["source"]["phrase"] = f"measured kernels: vLLM {version} on H100-SXM"
    path = tmp / "profile.yaml"
    path.write_text(yaml.safe_dump(data))
    return path


def profile_scenario(tmp: Path, version: Any, **serving: Any) -> Scenario:
    raw = {"name": "p", "model": "llama-3-8b", "cost": {"profile": "profile.yaml"},
           "serving": serving, "workload": copy.deepcopy(WORKLOAD)}
    profile_at(tmp, version)
    path = tmp / "s.yaml"
    path.write_text(yaml.safe_dump(raw))
    return load(path)


@pytest.mark.parametrize(("version", "shown"), [
    ("0.27.0", "gives source.version '0.27.0', outside"),
    ("0.10.0", "gives source.version '0.10.0', outside"),
    ("banana", "gives source.version 'banana', outside"),
    (None, "gives no source.version, so it names none of"),
])
def test_a_profile_release_outside_the_modelled_ones_is_noted(
        version: Any, shown: str, tmp_path: Path) -> None:
    from sim.cost import profilefile

    profilefile.profile_source.cache_clear()  # each test writes its own file at one path
    sc = profile_scenario(tmp_path, version)
    said = (f"cost.profile: profile.yaml {shown} the vLLM releases whose memory rules "
            f"servesim models ({FIRST[0]}.{FIRST[1]} to {LAST[0]}.{LAST[1]}); the KV cache "
            f"is sized as vLLM {DEFAULT_VERSION} sizes it")
    assert any(n.startswith(said) for n in sc.notes), sc.notes
    # The note changes nothing: the default release still sizes the cache.
    rules = pools(sc)[0].memory_rules
    assert rules is not None and rules.version == DEFAULT_VERSION
    profilefile.profile_source.cache_clear()
    for quiet in (profile_scenario(tmp_path, "0.24.0"),
                  profile_scenario(tmp_path, version, vllm_version="0.24.0"),
                  profile_scenario(tmp_path, version, num_gpu_blocks=1000)):
        assert not any(n.startswith("cost.profile") for n in quiet.notes), quiet.notes
    profilefile.profile_source.cache_clear()


# 10: num_gpu_blocks against the GPU's memory (vLLM allocates exactly the override)

def blocks(n: int, **serving: Any) -> dict[str, Any]:
    """llama-3-8b on one h100-sxm (29,135 blocks of 2 MiB by memory) with ``n`` blocks."""
    return scenario(model="llama-3-8b", cost="roofline",
                    hardware={"gpu": "h100-sxm", "tp": 1},
                    serving={"policy": "chunked", "num_gpu_blocks": n, **serving})


def test_blocks_past_the_gpus_memory_are_refused_with_the_numbers() -> None:
    # No server can allocate more than the GPU holds beside the weights (79.20 - 14.96 GiB
    # = 32,893 blocks of 2 MiB): refused.
    msg = str(refused(blocks(1_000_000)))
    assert msg == ("s.yaml: serving.num_gpu_blocks: got 1000000 blocks of 2097152 bytes, "
                   "1953.12 GiB per GPU, more than the 64.25 GiB h100-sxm has beside the "
                   "weights (79.20 GiB less 14.96), so no server could allocate them; give "
                   "at most 32893 blocks, or leave it out to size the cache from memory")
    raw = blocks(1)
    raw["serving"] = {"policy": "disaggregated"}
    raw["disaggregated"] = {"prefill": {"num_gpu_blocks": 40_000}}
    assert "disaggregated.prefill.num_gpu_blocks: got 40000 blocks" in str(refused(raw))
    # Within that but past servesim's estimate of vLLM's other terms: run, with a note (a
    # framework sizing its own cache, as the --silicon rows do, subtracts its own terms).
    assert notes(blocks(32_500)) == (
        "serving.num_gpu_blocks: 32500 blocks of 2097152 bytes, 63.48 GiB per GPU, more "
        "than the 63.24 GiB h100-sxm has for the KV cache after weights 14.96, activation "
        "0.84, non-torch 0.16 and CUDA graphs 0.00 GiB (vLLM's terms as servesim estimates "
        "them): vLLM would likely fail to allocate them at start-up; the run simulates "
        "them all",)


def test_blocks_past_the_utilization_budget_get_a_note() -> None:
    assert notes(blocks(31_000)) == (
        "serving.num_gpu_blocks: 31000 blocks of 2097152 bytes, 60.55 GiB per GPU, more than "
        "the 56.91 GiB memory_utilization 0.92 leaves (29135 blocks); they fit the GPU's "
        "memory, so vLLM allocates them and the run simulates them all",)
    assert notes(blocks(29_135)) == ()


def test_fault_keys_that_cannot_act_get_a_note() -> None:
    """An empty faults section, max_retries under fail and repair_s without random
    failures had loaded without a word (docs/reliability.md promised the first)."""
    assert notes(scenario(faults={})) == (
        "faults: injects no fault (no outages, failures_per_hour 0); add outages or a "
        "failures_per_hour above 0 to inject some",)
    outage = [{"replica": 0, "at_s": 0.1, "duration_s": 0.1}]
    assert notes(scenario(faults={"outages": outage, "on_failure": "fail",
                                  "max_retries": 3})) == (
        "faults.max_retries: 3 is not used: it bounds the retries of on_failure: retry, and "
        "under fail a lost request fails at once",)
    assert notes(scenario(faults={"outages": outage, "repair_s": 10})) == (
        "faults.repair_s: 10 s is not used: it is how long a random failure "
        "(failures_per_hour) lasts, and each planned outage lasts its own duration_s",)
    assert notes(scenario(faults={"outages": outage, "failures_per_hour": 0.1,
                                  "repair_s": 10, "max_retries": 1})) == ()
