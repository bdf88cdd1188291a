"""Reading a replay record (sim/validate/replayfile.py) and ``validate --replay`` on one:
every fault in a hand-edited or truncated file is one error naming the key and row, and
what cannot be judged says so instead of failing or passing."""

from __future__ import annotations

import copy
import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sim.cost.profilefile import load_profile
from sim.errors import ServesimError
from sim.validate.command import main
from sim.validate.replayfile import read_record

PROFILE = (Path(__file__).parents[1] / "sim" / "data" / "profiles"
           / "h100-sxm-llama-3-8b-tp1-vllm.yaml")
SHAPE = ("seqs", "new_tokens", "context_tokens", "prefill_seqs", "prefill_tokens",
         "prefill_pairs", "decode_kv")


def record() -> dict[str, Any]:
    """Three requests of 100-token prompts and 3 output tokens each, 1 s apart, each
    served alone: a prefill step then two decode steps of 20 ms, as a replay writes it."""
    model = dataclasses.asdict(load_profile(str(PROFILE)).model)
    steps: dict[str, list[float]] = {k: [] for k in ("start_s", "end_s", "exec_s", "cpu_s",
                                                      "host_s", *SHAPE)}
    first, finish = [], []
    for i in range(3):
        t = float(i)
        for j, (new, ctx) in enumerate(((100, 0), (1, 100), (1, 101))):
            s = t + 0.02 * j
            prefill = new > 1
            row = (s, s + 0.02, 0.019, 0.019, 0.001, 1, new, ctx, int(prefill),
                   new if prefill else 0, new * (new + 1) // 2 if prefill else 0,
                   0 if prefill else ctx + 1)
            for k, v in zip(steps, row, strict=True):
                steps[k].append(v)
        first.append(t + 0.02)
        finish.append(t + 0.06)
    return {
        "schema": "servesim-replay/1", "label": "below-1rps", "level": "below",
        "rate_rps": 1.0, "load": 0.1, "notes": [], "model": model,
        "device": {"type": "cuda", "name": "test", "threads": 1},
        "serving": {"policy": "continuous", "max_num_seqs": 8},
        "requests": {"arrival_s": [0.0, 1.0, 2.0], "prompt_tokens": [100] * 3,
                     "output_tokens": [3] * 3, "first_scheduled_s": [0.0, 1.0, 2.0],
                     "first_token_s": first, "finish_s": finish, "preemptions": [0] * 3,
                     "status": ["finished"] * 3, "reason": [""] * 3},
        "steps": steps,
        "probe": {"entries": {"decode b=1 c=100": [[1, 100]]},
                  "before_s": {"decode b=1 c=100": 0.02},
                  "after_s": {"decode b=1 c=100": 0.021}},
    }


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    """Set ``path`` (dotted keys, a trailing [i] for a list item) to ``value``; a value
    of ``...`` deletes the key."""
    def edit(rec: dict[str, Any]) -> None:
        *parents, last = path.split(".")
        node = rec
        for k in parents:
            node = node[k]
        if last.endswith("]"):
            key, i = last[:-1].split("[")
            node[key][int(i)] = value
        elif value is ...:
            del node[last]
        else:
            node[last] = value
    return edit


FAULTS = [
    ("serving", ..., r"serving: got None, expected an object$"),
    ("serving", [1], r"serving: got \[1\], expected an object"),
    ("model", "llama", r"model: got 'llama', expected an object"),
    ("model.name", None, r"model\.name: got None, expected text"),
    ("device", "gpu", r"device: got 'gpu', expected an object or null"),
    ("device.type", ["cuda"], r"device\.type: got \['cuda'\], expected text"),
    ("rate_rps", "fast", r"rate_rps: got 'fast', expected null or a finite number > 0"),
    ("load", "high", r"load: got 'high', expected null or a finite number >= 0"),
    ("label", "a/b", r"label: got 'a/b', expected a name .* without /"),
    ("label", "a\x00b", r"label: got 'a\\x00b'"),
    # 100 characters but 400 bytes: past what a file name holds once it names the outputs.
    ("label", "\U0001F600" * 100, r"label: got a JSON str, expected a name of 1 to 100 bytes"),
    ("notes", "x", r"notes: got 'x', expected a list of text"),
    ("probe", [1], r"probe: got \[1\], expected an object or null"),
    ("probe.before_s", ..., r"probe\.before_s: got None, expected an object"),
    ("probe.entries", "x", r"probe\.entries: got 'x', expected an object"),
    ("probe.entries.decode b=1 c=100", [[1]],
     r"probe\.entries\.decode b=1 c=100: got \[\[1\]\], expected a list of \[new"),
    ("probe.after_s.decode b=1 c=100", None,
     r"probe\.after_s\.decode b=1 c=100: got None, expected seconds > 0"),
    ("requests.prompt_tokens[1]", 10**30, r"requests\.prompt_tokens\[1\]: got 10+, expected "
                                          r"a whole number from 1 to 2147483647"),
    ("requests.prompt_tokens[1]", 2.5, r"requests\.prompt_tokens\[1\]: got 2\.5, expected a "
                                       r"whole number"),
    ("requests.output_tokens[1]", "3", r"requests\.output_tokens\[1\]: got '3', expected a "
                                       r"whole number"),
    ("requests.output_tokens[1]", 0, r"requests\.output_tokens\[1\]: got 0, expected a whole "
                                     r"number from 1"),
    ("requests.arrival_s[1]", None, r"requests\.arrival_s\[1\]: got None, expected a finite "
                                    r"time \(s\)$"),
    ("requests.arrival_s[1]", -5.0, r"requests\.arrival_s\[1\]: got -5\.0, expected a time "
                                    r">= 0 and not before the row above"),
    ("requests.arrival_s[2]", 0.5, r"requests\.arrival_s\[2\]: got 0\.5, expected a time >= 0 "
                                   r"and not before the row above"),
    ("requests.status[1]", "finsihed", r"requests\.status\[1\]: got 'finsihed', expected "
                                       r"one of finished, rejected, unfinished"),
    ("requests.first_token_s[1]", None, r"requests\.first_token_s\[1\]: null for a finished "
                                        r"request"),
    ("requests.finish_s[1]", float("inf"), r"requests\.finish_s\[1\]: got inf, expected a "
                                           r"finite time \(s\) or null"),
    ("requests.first_token_s[1]", 0.5, r"requests\.first_token_s\[1\]: got 0\.5, before its "
                                       r"arrival_s 1\.0 \(a negative latency\)"),
    ("requests.finish_s[1]", 1.01, r"requests\.finish_s\[1\]: got 1\.01, before its "
                                   r"first_token_s 1\.02"),
    ("requests.preemptions[0]", -1, r"requests\.preemptions\[0\]: got -1, expected a whole "
                                    r"number from 0"),
    ("requests.reason[0]", 5, r"requests\.reason\[0\]: got 5, expected text or null"),
    ("requests.reason", ["", ""], r"requests\.reason: has 2 rows, requests\.arrival_s 3"),
    ("requests.finish_s", ..., r"requests\.finish_s: missing"),
    ("requests", [], r"requests: got \[\], expected an object of columns"),
    ("steps.seqs[0]", None, r"steps\.seqs\[0\]: got None, expected a whole number"),
    ("steps.seqs[0]", 0, r"steps\.seqs\[0\]: got 0, expected a whole number >= 1"),
    ("steps.host_s", [0.001], r"steps\.host_s: has 1 rows, steps\.start_s 9"),
    ("steps.exec_s[2]", -0.01, r"steps\.exec_s\[2\]: got -0\.01, expected seconds > 0"),
    ("steps.exec_s[2]", 0, r"steps\.exec_s\[2\]: got 0, expected seconds > 0"),
    ("steps.exec_s[2]", None, r"steps\.exec_s\[2\]: got None, expected a finite time"),
    ("steps.end_s[2]", 0.0, r"steps\.end_s\[2\]: got 0, expected a time not before its "
                            r"start_s"),
    # A scheduling time outside arrival..first token is a negative queueing time.
    ("requests.first_scheduled_s[0]", -5.0, r"requests\.first_scheduled_s\[0\]: got -5\.0, "
                                            r"before its arrival_s 0\.0; expected a time from "
                                            r"the request's arrival to its first token$"),
    ("requests.first_scheduled_s[1]", 1.5, r"requests\.first_scheduled_s\[1\]: got 1\.5, "
                                           r"after its first_token_s 1\.02; expected"),
    ("requests.first_scheduled_s[1]", float("nan"), r"requests\.first_scheduled_s\[1\]: got "
                                                    r"nan, expected a finite time \(s\) or null"),
    # Times are held below the bound the rest of the tool uses.
    ("requests.finish_s[0]", 1e300, r"requests\.finish_s\[0\]: got 1e\+300, expected a time "
                                    r"below 1e\+09 s \(31 years\)$"),
    ("steps.end_s[8]", 1e9, r"steps\.end_s\[8\]: got 1000000000\.0, expected a time below "
                            r"1e\+09 s"),
    # An executor or CPU time longer than its own step is a hand edit or mixed units.
    ("steps.exec_s[0]", 50.0, r"steps\.exec_s\[0\]: got 50, longer than its step "
                              r"\(end_s - start_s = 0\.02 s\); expected at most that, give "
                              r"or take 0\.001 s$"),
    ("steps.cpu_s[4]", 5.0, r"steps\.cpu_s\[4\]: got 5, longer than its step \(end_s - "
                            r"start_s = 0\.02 s\)"),
    ("steps.start_s", 0, r"steps\.start_s: got 0, expected a list$"),
]


@pytest.mark.parametrize(("path", "value", "message"), FAULTS)
def test_a_fault_in_a_replay_record_is_one_error_naming_it(path: str, value: Any,
                                                           message: str) -> None:
    """Each of these had been a traceback (KeyError, TypeError, OverflowError, a negative
    simulation delay), a run that hung, or a comparison silently over fewer requests."""
    rec = record()
    read_record(copy.deepcopy(rec), "r.json")  # the unedited record reads
    _set(path, value)(rec)
    with pytest.raises(ServesimError, match=r"^r\.json: " + message):
        read_record(rec, "r.json")


def test_a_long_prompts_step_counts_read() -> None:
    """A 64k-token prompt's causal pairs pass 2**31: a step's counts are bounded only by
    what a float holds exactly."""
    rec = record()
    for key in ("new_tokens", "prefill_tokens"):
        rec["steps"][key][0] = 65536
    rec["steps"]["prefill_pairs"][0] = 65536 * 65537 // 2
    assert read_record(rec, "r.json").steps["prefill_pairs"][0] == 65536 * 65537 // 2
    rec["steps"]["prefill_pairs"][0] = 2**53
    with pytest.raises(ServesimError, match=r"steps\.prefill_pairs\[0\]: got 9007199254740992, "
                                            r"expected a whole number from 0 to "
                                            r"9007199254740991"):
        read_record(rec, "r.json")


def test_a_record_without_steps_or_probe_reads() -> None:
    """Steps and the probe are optional: {} or null is a record without them, and
    nothing downstream asks for a step column that is not there."""
    for steps in ({}, None, {"start_s": [], "end_s": [], "exec_s": []}):
        rec = record()
        rec["steps"], rec["probe"], rec["rate_rps"] = steps, None, None
        got = read_record(rec, "r.json")
        assert got.probe is None and got.rate_rps is None
        assert all(len(v) == 0 for v in got.steps.values()) and "start_s" in got.steps


def _write(path: Path, rec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(rec))
    return path


def _levels(out: Path) -> list[dict[str, Any]]:
    levels: list[dict[str, Any]] = json.loads((out / "validation.json").read_text())["levels"]
    return levels


def test_replay_with_a_null_rate_and_two_files_of_one_label(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A record without a rate prints "rate not recorded" (it had been a format error);
    a second file of the same label gets its own files (label~2) instead of overwriting
    the first's CSVs."""
    rec = record()
    rec["rate_rps"] = None
    a = _write(tmp_path / "a.json", rec)
    b = _write(tmp_path / "b.json", record())
    out = tmp_path / "out"
    assert main(["--replay", str(a), str(b), "--profile", str(PROFILE), "--out", str(out),
                 "--no-plots"]) == 0
    text = capsys.readouterr().out
    assert "== below-1rps: below saturation, rate not recorded (load 0.10" in text
    assert "== below-1rps~2: below saturation, 1 req/s" in text
    labels = [lv["label"] for lv in _levels(out)]
    assert labels == ["below-1rps", "below-1rps~2"]
    assert (out / "real-below-1rps.csv").exists() and (out / "real-below-1rps~2.csv").exists()
    assert all(lv["comparison"]["compared"] == 3 for lv in _levels(out))
    probe = _levels(out)[0]["probe"]["decode b=1 c=100"]
    assert probe["before_s"] == 0.02 and probe["after_s"] == 0.021 and probe["predicted_s"] > 0


def test_nothing_to_compare_is_not_judged(tmp_path: Path,
                                          capsys: pytest.CaptureFixture[str]) -> None:
    """Every request rejected in the real run, or one output token each (no TPOT): no
    error can be computed, so the level is "not judged" with the reason, not "OVER the
    bar" (which had been printed for an empty comparison)."""
    rejected = record()
    rq = rejected["requests"]
    rq["status"] = ["rejected"] * 3
    rq["first_token_s"] = rq["finish_s"] = rq["first_scheduled_s"] = [None] * 3
    rejected["steps"] = {}
    one = record()
    one["requests"]["output_tokens"] = [1] * 3
    one["requests"]["finish_s"] = one["requests"]["first_token_s"]
    for name, rec, why in (("r", rejected, "no request finished in both runs"),
                           ("o", one, "no compared request has a TPOT")):
        out = tmp_path / name
        assert main(["--replay", str(_write(tmp_path / f"{name}.json", rec)), "--profile",
                     str(PROFILE), "--out", str(out), "--no-plots"]) == 0
        verdict = _levels(out)[0]["verdict"]
        assert verdict["passed"] is None and why in verdict["why"]
        text = capsys.readouterr().out
        assert f"not judged ({why}" in text and "OVER" not in text


def test_a_profile_of_another_model_names_the_dimension(tmp_path: Path) -> None:
    rec = record()
    rec["model"]["layers"] = 31
    with pytest.raises(ServesimError, match=r"which differs in layers 32 in the profile, "
                                            r"31 in the replay"):
        main(["--replay", str(_write(tmp_path / "a.json", rec)), "--profile", str(PROFILE),
              "--out", str(tmp_path / "out"), "--no-plots"])


def test_a_bad_serving_limit_names_the_replay_file(tmp_path: Path) -> None:
    rec = record()
    rec["serving"]["max_num_seqs"] = "many"
    path = _write(tmp_path / "a.json", rec)
    with pytest.raises(ServesimError, match=r"a\.json.*max_num_seqs"):
        main(["--replay", str(path), "--profile", str(PROFILE), "--out",
              str(tmp_path / "out"), "--no-plots"])


def test_scalar_step_columns_are_not_a_record_without_steps() -> None:
    """Scalar zeros in every step column are falsy, but not a record without steps: the
    first column is named, not read as {}."""
    rec = record()
    rec["steps"] = {k: 0 for k in rec["steps"]}
    with pytest.raises(ServesimError, match=r"^r\.json: steps\.start_s: got 0, expected a "
                                            r"list$"):
        read_record(rec, "r.json")


@pytest.mark.parametrize("serving, message", [
    ({"policy": "continuous", "max_num_seq": 1},
     r"a\.json: serving\.max_num_seq: unknown key 'max_num_seq'; allowed: .*max_num_seqs"),
    ({"policy": "continuous", "max_num_seqs": None},
     r"a\.json: serving\.max_num_seqs: got None, expected an integer"),
])
def test_an_unknown_or_null_serving_key_is_refused(tmp_path: Path, serving: dict[str, Any],
                                                   message: str) -> None:
    """A misspelt or null serving limit had been dropped for its default without a word
    (a run with max_num_seq: 1 was simulated with 256 sequences)."""
    rec = record()
    rec["serving"] = serving
    path = _write(tmp_path / "a.json", rec)
    with pytest.raises(ServesimError, match=message):
        main(["--replay", str(path), "--profile", str(PROFILE), "--out",
              str(tmp_path / "out"), "--no-plots"])


def test_a_record_with_every_serving_field_reads(tmp_path: Path) -> None:
    """What the replay writes (every ServingConfig field, nulls for unset optionals) is
    read as before."""
    from sim.config.serving import ServingConfig
    from sim.configtools import build

    rec = record()
    rec["serving"] = dataclasses.asdict(build(ServingConfig, {"policy": "continuous",
                                                              "max_num_seqs": 8}, "serving"))
    assert rec["serving"]["num_gpu_blocks"] is None
    assert main(["--replay", str(_write(tmp_path / "a.json", rec)), "--profile", str(PROFILE),
                 "--out", str(tmp_path / "out"), "--no-plots"]) == 0


@pytest.mark.parametrize(("edit", "message"), [
    ({"prefill_tokens": 5000}, r"steps\.prefill_tokens\[0\]: got 5000, expected at most its "
                               r"new_tokens"),
    ({"prefill_seqs": 7}, r"steps\.prefill_seqs\[0\]: got 7, expected at most its seqs"),
    ({"prefill_pairs": 99}, r"steps\.prefill_pairs\[0\]: got 99, expected from 1 a prefill "
                            r"token"),
    ({"prefill_pairs": 10**9}, r"steps\.prefill_pairs\[0\]: got 1e\+09"),
    ({"decode_kv": 0, "index": 1}, r"steps\.decode_kv\[1\]: got 0, expected from 1 to its "
                                   r"context \+ 1"),
    ({"context_tokens": 0, "index": 1}, r"steps\.decode_kv\[1\]: got 101"),
    ({"new_tokens": 0, "index": 1}, r"steps\.new_tokens\[1\]: got 0, expected at least one"),
    ({"start_s": 0.005, "index": 1}, r"steps\.start_s\[1\]: got 0\.005, before the previous "
                                     r"step's end_s 0\.02; steps run one after another"),
])
def test_a_steps_counts_that_disagree_are_refused(edit: dict[str, float], message: str) -> None:
    """A step's shape fields had been read one by one: a prefill of 5,000 tokens in a
    step of 100, a decode attending more KV than its context holds, or steps out of time
    order were priced as given (the speed diagnostic moved from 2.31x to 1.57x)."""
    rec = record()
    edit = dict(edit)
    i = int(edit.pop("index", 0))
    for key, value in edit.items():
        rec["steps"][key][i] = value
    with pytest.raises(ServesimError, match=message):
        read_record(rec, "r.json")


@pytest.mark.parametrize(("status", "key"), [("rejected", "first_scheduled_s"),
                                             ("unfinished", "finish_s")])
def test_a_status_its_times_contradict_is_refused(status: str, key: str) -> None:
    """A rejected request never ran and an unfinished one never finished: either with
    the times of a finished one had been counted by its status alone."""
    rec = record()
    rec["requests"]["status"][1] = status
    with pytest.raises(ServesimError, match=rf"requests\.{key}\[1\]: got [0-9.]+ for a request "
                                            rf"{status}, expected null"):
        read_record(rec, "r.json")


def test_a_model_key_no_model_has_is_refused() -> None:
    """Serving's unknown keys were refused and the model's dropped: a misspelt dimension
    would have gone unchecked against the profile."""
    rec = record()
    rec["model"]["bogus"] = 3
    with pytest.raises(ServesimError, match=r"r\.json: model\.bogus: not a field of a model "
                                            r"description"):
        read_record(rec, "r.json")
