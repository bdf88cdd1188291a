"""``servesim validate --replay A --against B``: two recorded runs of the same requests
compared with each other, on hand-made records whose differences are known exactly;
and the percentile rank every comparison row carries."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

import pytest

from sim.cost.presets import MODELS
from sim.errors import ServesimError
from sim.validate.command import main

# Four requests, each alone on the device: arrival s, prompt and output tokens,
# TTFT s and decode seconds per output token after the first.
ROWS = [(0.0, 40, 5, 0.010, 0.002), (1.0, 80, 3, 0.020, 0.003),
        (2.0, 20, 9, 0.030, 0.004), (3.0, 60, 2, 0.040, 0.005)]


def record(ttft_scale: float = 1.0, tpot_scale: float = 1.0, label: str = "below-4rps",
           **serving: Any) -> dict[str, Any]:
    """A ``servesim-replay/1`` record of ROWS with TTFTs and TPOTs scaled."""
    arrival = [r[0] for r in ROWS]
    first = [a + r[3] * ttft_scale for a, r in zip(arrival, ROWS, strict=True)]
    finish = [f + (r[2] - 1) * r[4] * tpot_scale for f, r in zip(first, ROWS, strict=True)]
    return {
        "schema": "servesim-replay/1", "label": label, "level": "below", "rate_rps": 4.0,
        "model": dataclasses.asdict(MODELS["tiny"]), "device": {"type": "cpu"},
        "serving": {"policy": "continuous", "max_num_seqs": 8, "max_num_batched_tokens": 256,
                    "num_kv_blocks": 64, **serving},
        "requests": {"arrival_s": arrival, "prompt_tokens": [r[1] for r in ROWS],
                     "output_tokens": [r[2] for r in ROWS], "first_scheduled_s": arrival,
                     "first_token_s": first, "finish_s": finish, "preemptions": [0] * 4,
                     "status": ["finished"] * 4, "reason": [""] * 4},
        "steps": {"start_s": [], "end_s": [], "exec_s": []},
    }


def write(path: Path, rec: dict[str, Any]) -> Path:
    path.write_text(json.dumps(rec))
    return path


def test_two_runs_differ_by_exactly_their_scaling(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    """Every TTFT 10% longer and every TPOT 20% longer in the second run: each
    percentile differs by exactly that (a percentile of scaled values is the scaled
    percentile), and E2E by the mix worked out here."""
    a = write(tmp_path / "a.json", record())
    b = write(tmp_path / "b.json", record(ttft_scale=1.1, tpot_scale=1.2))
    assert main(["--replay", str(a), "--against", str(b), "--out", str(tmp_path / "o"),
                 "--no-plots"]) == 0
    lv = json.loads((tmp_path / "o" / "validation.json").read_text())["levels"][0]
    cmp = lv["comparison"]
    assert cmp["compared"] == 4 and cmp["first"]["finished"] == 4
    for q in ("p50", "p90", "p99"):
        assert cmp["metrics"]["ttft"][q]["rel_diff"] == pytest.approx(0.10)
        assert cmp["metrics"]["tpot"][q]["rel_diff"] == pytest.approx(0.20)
    # E2E p50 by hand: first run 0.018, 0.026, 0.062, 0.045 s -> median (0.026 + 0.045)/2;
    # second run 0.0206, 0.0292, 0.0714, 0.05 s -> median (0.0292 + 0.05)/2.
    assert cmp["metrics"]["e2e"]["p50"]["first"] == pytest.approx(0.0355)
    assert cmp["metrics"]["e2e"]["p50"]["second"] == pytest.approx(0.0396)
    assert cmp["worst"] == pytest.approx(0.20)
    # Where the first run's value falls among the second's 0.011, 0.022, 0.033, 0.044 s
    # (positions 0-3 of 3): TTFT p50 0.025 s at 1 + 3/11, p90 0.037 s at 2 + 4/11.
    assert cmp["metrics"]["ttft"]["p50"]["second_rank"] == pytest.approx(100 * (14 / 11) / 3)
    assert cmp["metrics"]["ttft"]["p90"]["second_rank"] == pytest.approx(100 * (26 / 11) / 3)
    out = capsys.readouterr().out
    assert "differ by up to 20.0% (more than the 15% bar)" in out
    assert (tmp_path / "o" / "first-below-4rps.csv").is_file()
    # A run against its copy differs by nothing.
    twin = write(tmp_path / "twin.json", record())
    assert main(["--replay", str(a), "--against", str(twin), "--out", str(tmp_path / "s"),
                 "--no-plots", "--bar", "0.1"]) == 0
    same = json.loads((tmp_path / "s" / "validation.json").read_text())["levels"][0]
    assert same["comparison"]["worst"] == 0.0 and same["within"] is True
    # ... and each of its percentiles ranks at that percentile of itself.
    assert {q: row["second_rank"] for q, row in same["comparison"]["metrics"]["ttft"].items()
            } == pytest.approx({"p50": 50.0, "p90": 90.0, "p99": 99.0})
    assert "differ by up to 0.0% (within the 10% bar)" in capsys.readouterr().out


def test_unfinished_or_single_token_runs_are_not_judged(tmp_path: Path,
                                                        capsys: pytest.CaptureFixture[str]
                                                        ) -> None:
    a = write(tmp_path / "a.json", record())
    cut = record()
    cut["requests"]["status"][3], cut["requests"]["finish_s"][3] = "unfinished", None
    b = write(tmp_path / "b.json", cut)
    # --against=FILE spelling dispatches the same way.
    assert main(["--replay", str(a), f"--against={b}", "--out", str(tmp_path / "o"),
                 "--no-plots"]) == 0
    lv = json.loads((tmp_path / "o" / "validation.json").read_text())["levels"][0]
    assert lv["comparison"]["compared"] == 3 and lv["within"] is None
    out = capsys.readouterr().out
    assert "second 3 finished, 1 unfinished" in out
    assert "not judged: 1 requests were left unfinished" in out
    ones = record()
    ones["requests"]["output_tokens"] = [1, 1, 1, 1]
    ones["requests"]["finish_s"] = ones["requests"]["first_token_s"]
    c = write(tmp_path / "c.json", ones)
    c2 = write(tmp_path / "c2.json", ones)
    assert main(["--replay", str(c), "--against", str(c2), "--out", str(tmp_path / "p"),
                 "--no-plots"]) == 0
    assert "not compared (no request finished in both runs with a TTFT and a TPOT" in \
        capsys.readouterr().out


def test_one_first_run_against_two_keeps_both_pairs_files(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", record())
    copy = write(tmp_path / "copy.json", record())
    b = write(tmp_path / "b.json", record(tpot_scale=1.1))
    # A file against itself would differ by 0% whatever it holds.
    with pytest.raises(ServesimError, match=r"--against: got .*a\.json, the --replay file "
                                            r"itself; give a second run of the same requests"):
        main(["--replay", str(a), "--against", str(tmp_path / "." / "a.json"),
              "--out", str(tmp_path / "o"), "--no-plots"])
    assert main(["--replay", str(a), str(a), "--against", str(copy), str(b),
                 "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    levels = json.loads((tmp_path / "o" / "validation.json").read_text())["levels"]
    assert [lv["label"] for lv in levels] == ["below-4rps", "below-4rps~2"]
    assert (tmp_path / "o" / "second-below-4rps~2.csv").is_file()
    assert levels[1]["comparison"]["worst"] == pytest.approx(0.10)


def test_runs_of_other_requests_or_limits_are_refused(tmp_path: Path) -> None:
    a = write(tmp_path / "a.json", record())
    other = record()
    other["requests"]["prompt_tokens"][2] = 21
    b = write(tmp_path / "b.json", other)
    with pytest.raises(ServesimError, match=r"differ in requests.prompt_tokens at row 2 "
                                            r"\(20 vs 21\)"):
        main(["--replay", str(a), "--against", str(b), "--out", str(tmp_path / "o")])
    c = write(tmp_path / "c.json", record(max_num_seqs=16))
    with pytest.raises(ServesimError, match=r"different serving.max_num_seqs \(8 vs 16\)"):
        main(["--replay", str(a), "--against", str(c), "--out", str(tmp_path / "o")])
    d = record()
    d["model"]["layers"] = 3
    e = write(tmp_path / "e.json", d)
    with pytest.raises(ServesimError, match=r"different model.layers \(2 vs 3\)"):
        main(["--replay", str(a), "--against", str(e), "--out", str(tmp_path / "o")])
    with pytest.raises(ServesimError, match="got 2 --replay and 1 --against"):
        main(["--replay", str(a), str(a), "--against", str(a), "--out", str(tmp_path / "o")])
    (tmp_path / "bad.json").write_text("{")
    with pytest.raises(ServesimError, match="cannot read replay"):
        main(["--replay", str(tmp_path / "bad.json"), "--against", str(a)])
    (tmp_path / "list.json").write_text("[1, 2]")
    with pytest.raises(ServesimError, match=r"list.json: not a replay file \(a JSON list"):
        main(["--replay", str(tmp_path / "list.json"), "--against", str(a)])
    ragged = record()
    ragged["steps"] = {"start_s": [0.0], "end_s": [1e-3], "exec_s": [1e-3]}
    g = write(tmp_path / "g.json", ragged)
    with pytest.raises(ServesimError, match=r"g.json: steps.seqs: missing"):
        main(["--replay", str(g), "--against", str(a)])
    nomodel = record()
    del nomodel["model"]
    h = write(tmp_path / "h.json", nomodel)
    with pytest.raises(ServesimError, match=r"^.*h.json: model"):
        main(["--replay", str(h), "--against", str(a)])
    # argparse's errors are one line too, not its usage block and an exit.
    with pytest.raises(ServesimError, match=r"^--bar 0: must be a number > 0"):
        main(["--replay", str(a), "--against", str(a), "--bar", "0"])


def test_profile_gives_each_runs_speed(tmp_path: Path, capsys: pytest.CaptureFixture[str]
                                       ) -> None:
    """With --profile, each run's steps are priced: a profile of 1 ms a step, decode
    steps that took 1.1 ms in the first run and 0.9 ms in the second."""
    import yaml

    from sim.cost.profile import FORMS
    from sim.cost.profilekeys import SCHEMA
    from sim.cost.shape import StepShape, decode_shape, shape_of

    coefs = {k: dict.fromkeys(f.coefs, 0.0) for k, f in FORMS.items()}
    coefs["step"]["const_s"] = 1e-3
    prof = tmp_path / "p.yaml"
    prof.write_text(yaml.safe_dump({
        "schema": SCHEMA, "device": {"name": "t"}, "dtype": "fp32", "tp": 1,
        "model": dataclasses.asdict(MODELS["tiny"]),
        "components": {k: {"coef": v} for k, v in coefs.items()}}))
    shapes = [shape_of([(40, 0)]), decode_shape(1, 40), decode_shape(1, 41)]
    runs = []
    for name, dec in (("a", 1.1e-3), ("b", 0.9e-3)):
        rec = record()
        rec["steps"] = {f: list(col) for f, col in
                        zip(StepShape._fields, zip(*shapes, strict=True), strict=True)}
        execs = [1.05e-3, dec, dec]
        start = [0.0, 1.05e-3, 1.05e-3 + dec]  # back to back: no idle, no waking
        rec["steps"].update(start_s=start, exec_s=execs,
                            end_s=[s + e for s, e in zip(start, execs, strict=True)])
        runs.append(write(tmp_path / f"{name}.json", rec))
    assert main(["--replay", str(runs[0]), "--against", str(runs[1]), "--profile", str(prof),
                 "--out", str(tmp_path / "o"), "--no-plots"]) == 0
    speeds = json.loads((tmp_path / "o" / "validation.json").read_text())["levels"][0]["speeds"]
    assert speeds[0]["prefill_factor"] == pytest.approx(1.05)
    assert speeds[0]["decode_factor"] == pytest.approx(1.1)
    assert speeds[1]["decode_factor"] == pytest.approx(0.9)
    out = capsys.readouterr().out
    assert "first run: prefill steps at 1.050x, decode-only steps at 1.100x" in out
    # A profile of another model cannot price these runs.
    other = yaml.safe_load(prof.read_text())
    other["model"]["layers"] = 4
    prof.write_text(yaml.safe_dump(other))
    with pytest.raises(ServesimError, match="profile: it was measured for model 'tiny', the "
                                            "replay's model is 'tiny', which differs in "
                                            "layers 4 in the profile, 2 in the replay"):
        main(["--replay", str(runs[0]), "--against", str(runs[1]), "--profile", str(prof),
              "--out", str(tmp_path / "o"), "--no-plots"])


def test_rank_inverts_percentile_and_shares_ties() -> None:
    """sim.validate.validation.rank, which both comparisons use: positions 0, 1.5 (the two 2s
    share 1 and 2) and 3 of 3 for [1, 2, 2, 3]; a sample's own percentiles rank at
    their percentile."""
    import numpy as np

    from sim.validate.validation import rank

    v = np.array([1.0, 2.0, 2.0, 3.0])
    assert rank(v, 2.0) == 50.0 and rank(v, 0.5) == 0.0 and rank(v, 3.0) == 100.0
    assert rank(v, 2.5) == 75.0 and rank(np.array([4.0]), 4.0) == 50.0
    x = np.random.default_rng(0).random(73)
    assert [rank(x, float(np.percentile(x, q))) for q in (10, 50, 90, 99)] == \
        pytest.approx([10, 50, 90, 99])
