"""Workload, SLO and profile inputs a fuzzing pass (2026-12) found accepted silently or
refused with an unclear message: each is now one error line naming the file, the key
and the value, with what is allowed.

Found: a lognormal median outside [min, max], or a sigma of 1e308, collapsing every
length onto a bound; class names given as unquoted YAML null/true/1e3 renamed through
str() to None/True/1000.0; a profile's ``formula`` and ``per_layer`` never checked;
``think_time_s`` of 1e9 passing the load and failing at run time naming four causes; a
bad ``shared_prefix.block_tokens`` reported as ``serving.block_size``; ``calibrate
--refit`` of a missing CSV talking about its .meta.json; and ``slo.ttft_s: 500`` (meant
as milliseconds) running with 100% attainment.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from sim.cli import main
from sim.config.scenario import from_dict
from sim.cost.profilefile import PROFILE_DIR, load_profile
from sim.errors import ServesimError

LOGN = {"dist": "lognormal", "median": 100, "sigma": 0.5, "min": 1, "max": 4000}
FIXED = {"dist": "fixed", "value": 8}
WORKLOAD: dict[str, Any] = {"arrivals": {"process": "poisson", "rate": 5.0},
                            "num_requests": 4,
                            "lengths": {"prompt": dict(LOGN), "output": dict(FIXED)}}
TINY: dict[str, Any] = {"name": "tiny", "model": "tiny",
                        "cost": {"linear": {"step_s": 0.01}}, "workload": WORKLOAD}


def scenario(**changes: Any) -> dict[str, Any]:
    """The tiny scenario with top-level ``changes`` (deep-copied)."""
    return copy.deepcopy({**TINY, **changes})


def workload(**changes: Any) -> dict[str, Any]:
    """The tiny scenario with ``workload`` keys changed (None removes one)."""
    wl = {k: v for k, v in {**WORKLOAD, **changes}.items() if v is not None}
    return scenario(workload=wl)


def refused(raw: dict[str, Any]) -> ServesimError:
    with pytest.raises(ServesimError) as info:
        from_dict(raw, "s.yaml")
    return info.value


# 5: lognormal lengths


@pytest.mark.parametrize(("median", "bound"), [(100000, 50), (1e308, 50), (1e-300, 1)])
def test_a_lognormal_median_outside_min_max_is_refused(median: float, bound: int) -> None:
    prompt = {**LOGN, "median": median, "max": 50}
    err = refused(workload(lengths={"prompt": prompt, "output": FIXED}))
    assert err.where == "workload.lengths.prompt.median"
    assert "outside [min, max] = [1, 50]" in err.message
    assert f"nearly every one would be {bound}" in err.message


def test_an_absurd_lognormal_sigma_is_refused() -> None:
    err = refused(workload(lengths={"prompt": LOGN, "output": {**LOGN, "sigma": 1e308}}))
    assert err.where == "workload.lengths.output.sigma"
    assert "got 1e+308, must be at most 5" in err.message
    # The bound itself, and the medians at the bounds, are taken.
    from_dict(workload(lengths={"prompt": {**LOGN, "sigma": 5.0, "median": 1},
                                "output": {**LOGN, "median": 4000}}))


# 7: class names that YAML reads as something else


@pytest.mark.parametrize(("key", "spelt"), [("null", "null"), ("~", "null"),
                                            ("true", "true"), ("1e3", "1000.0"),
                                            ("-1", "-1"), (".nan", "nan")])
def test_a_class_name_yaml_reads_as_no_string_is_refused(tmp_path: Path, capsys: Any,
                                                         key: str, spelt: str) -> None:
    text = yaml.safe_dump({**TINY, "workload": {**WORKLOAD, "classes": {"ok": {"weight": 1}}}})
    path = tmp_path / "s.yaml"
    path.write_text(text.replace("    ok:", f"    {key}:"))
    assert main(["simulate", str(path), "--quiet", "--no-plots", "--out",
                 str(tmp_path / "o")]) == 2
    err = capsys.readouterr().err
    assert f"s.yaml: workload.classes.{spelt}: got the key {spelt}" in err
    assert "quote the key" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_a_class_name_with_a_non_ascii_letter_is_refused_saying_ascii() -> None:
    # The rule is ASCII letters; the message said "letters" and refused "café".
    with pytest.raises(ServesimError, match=r"class name 'café': use ASCII letters, digits"):
        from_dict(workload(classes={"café": {"weight": 1}}))


def test_a_quoted_class_name_is_kept_as_written() -> None:
    sc = from_dict(workload(classes={"null": {"weight": 1}, "1e3": {"weight": 1}}))
    assert sc.workload.classes is not None and list(sc.workload.classes) == ["null", "1e3"]


def test_a_speculative_class_name_yaml_reads_as_a_number_is_refused() -> None:
    raw = scenario(serving={"speculative": {"method": "ngram", "num_tokens": 2,
                                            "acceptance": {"rate": 0.5},
                                            "classes": {1: {"rate": 0.5}}}})
    err = refused(raw)
    assert err.where == "serving.speculative.classes.1"
    assert "got the key 1, which YAML reads as a number" in err.message


# 8: a profile's formula and per_layer


def _profile(tmp_path: Path, edit: Any) -> Path:
    data = yaml.safe_load((PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text())
    edit(data["components"])
    path = tmp_path / "p.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


@pytest.mark.parametrize(("component", "key", "value", "says"), [
    ("step", "formula", "this text is never read", "servesim prices step by its own formula"),
    ("step", "formula", "const_s * 2", "give 'const_s + per_seq_s*seqs"),
    ("step", "per_layer", "yes", "got 'yes'; servesim prices step once a step, so it must "
                                 "be false"),
    ("step", "per_layer", True, "must be false"),
    ("linear", "per_layer", False, "servesim prices linear per layer, so it must be true"),
    ("decode_attention", "formula", "grid", "or 'grid over (decode_seqs"),
])
def test_a_profile_formula_or_per_layer_servesim_does_not_price_is_refused(
        tmp_path: Path, component: str, key: str, value: Any, says: str) -> None:
    path = _profile(tmp_path, lambda comps: comps[component].__setitem__(key, value))
    with pytest.raises(ServesimError) as info:
        load_profile(str(path))
    assert info.value.source == str(path)
    assert info.value.where == f"components.{component}.{key}"
    assert says in info.value.message


def test_a_profile_may_leave_formula_and_per_layer_out(tmp_path: Path) -> None:
    def drop(comps: dict[str, Any]) -> None:
        for comp in comps.values():
            comp.pop("formula", None)
            comp.pop("per_layer", None)
    load_profile(str(_profile(tmp_path, drop)))


def test_an_older_components_formula_text_is_not_checked(tmp_path: Path) -> None:
    # Written before prefill_attention's const_s existed: its formula was another text.
    def older(comps: dict[str, Any]) -> None:
        pre = comps["prefill_attention"]
        pre["coef"].pop("const_s")
        pre["formula"] = "per_seq_s*prefill_seqs + per_token_s*prefill_tokens"
    load_profile(str(_profile(tmp_path, older)))


# 10: think_time_s


def test_a_think_time_of_1e9_is_refused_at_load() -> None:
    err = refused(workload(arrivals=None, concurrency=2, think_time_s=1e9))
    assert err.where == "workload.think_time_s"
    assert "must be less than 1e+09" in err.message


def test_think_times_that_carry_the_clock_past_1e9_are_refused_at_load() -> None:
    err = refused(workload(arrivals=None, concurrency=2, think_time_s=5e8, num_requests=20))
    assert err.where == "workload.think_time_s"
    assert "2 clients sending 20 requests wait 9 think times each, 4.5e+09 s" in err.message
    # With duration_s the clients stop sending at the end: no bound from the count.
    from_dict(workload(arrivals=None, concurrency=2, think_time_s=5e8, num_requests=20,
                       duration_s=100.0))
    from_dict(workload(arrivals=None, concurrency=2, think_time_s=1e8, num_requests=20))


# 11: shared_prefix.block_tokens


@pytest.mark.parametrize("tokens", [24, 8])
def test_prefix_block_tokens_off_the_block_size_name_the_workload_key(tokens: int) -> None:
    raw = workload(shared_prefix={"tokens": 64, "groups": 2, "block_tokens": tokens})
    raw["serving"] = {"prefix_caching": True, "block_size": 16}
    err = refused(raw)
    assert err.where == "workload.shared_prefix.block_tokens"
    assert f"got {tokens}" in err.message and "multiple of serving.block_size (16)" in err.message
    raw["workload"]["shared_prefix"]["block_tokens"] = 32
    from_dict(raw)


def test_a_shared_prefix_over_a_trace_gives_a_reason_true_of_any_trace(tmp_path: Path) -> None:
    """The reason had said the trace brings its own hashes, false of one without them."""
    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n0,64,4\n1,64,4\n")
    raw = workload(arrivals=None, lengths=None, trace={"path": str(trace)},
                   shared_prefix={"tokens": 64, "groups": 2, "block_tokens": 16})
    err = refused(raw)
    assert str(err) == ("s.yaml: workload.shared_prefix: applies to generated workloads; a "
                        "trace's shared prefixes come from its own hash_ids or "
                        "prefix_hash_ids column (a trace without one shares none); remove "
                        "shared_prefix")


# 13: calibrate --refit of a missing CSV


def test_refit_of_a_missing_csv_says_it_does_not_exist(tmp_path: Path, capsys: Any) -> None:
    missing = tmp_path / "gone.csv"
    assert main(["calibrate", "--refit", str(missing), "--out", str(tmp_path / "p.yaml")]) == 2
    err = capsys.readouterr().err
    assert f"{missing}: no such file: --refit takes the CSV a calibration wrote" in err
    assert "no gone.csv.meta.json beside it" not in err


# 14: SLO targets written in milliseconds


@pytest.mark.parametrize(("key", "value", "most"), [("ttft_s", 500, 60), ("tpot_s", 50, 1)])
def test_an_slo_in_milliseconds_is_refused_with_a_unit_hint(key: str, value: float,
                                                             most: float) -> None:
    err = refused(scenario(slo={key: value}))
    assert err.where == f"slo.{key}"
    assert f"got {value}, more than a {key[:-2]} target takes ({most} s)" in err.message
    assert f"write {value / 1000:g} for {value} ms" in err.message
    from_dict(scenario(slo={key: most}))  # the bound itself is taken


def test_an_slo_just_past_its_bound_is_printed_with_every_digit() -> None:
    """1.0000001 had been printed as 1, so the message read "got 1, more than ... (1 s)"."""
    err = refused(scenario(slo={"tpot_s": 1.0000001}))
    assert err.message.startswith("got 1.0000001, more than a tpot target takes (1 s)")
    assert "write 0.0010000001 for 1.0000001 ms" in err.message


@pytest.mark.parametrize("value", [1e9, 61000])
def test_an_slo_that_is_not_milliseconds_either_gets_no_milliseconds_hint(value: float) -> None:
    # 1e9 had been told "write 1000000 for 1000000000 ms", a target itself refused.
    err = refused(scenario(slo={"ttft_s": value}))
    assert err.message == (f"got {value:.15g}, more than a ttft target takes (60 s): SLO "
                           "targets are in seconds")


def test_a_class_slo_in_milliseconds_is_refused() -> None:
    err = refused(workload(classes={"a": {"weight": 1, "slo": {"ttft_s": 300}}}))
    assert err.where == "workload.classes.a.slo.ttft_s"
    assert "SLO targets are in seconds" in err.message
