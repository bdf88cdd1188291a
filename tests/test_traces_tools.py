"""Trace transformations, statistics (checked against the shipped-trace table), plot and CLI."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.configtools import build
from sim.errors import ServesimError
from sim.workload.cli import main
from sim.workload.traces import Trace, find_trace, load_trace
from sim.workload.tracestats import rate_bins, trace_stats
from sim.workload.tracetools import (
    TraceTransforms,
    apply_transforms,
    rate_window,
    repeat,
    sample,
    target_rate,
    time_scale,
    truncate_to_context,
    window,
)

FIX = Path(__file__).parent / "fixtures" / "traces"


def make(arrival: list[float] | None, prompt: list[int], output: list[int],
         hashes: bool = False) -> Trace:
    n = len(prompt)
    return Trace(
        arrival_s=None if arrival is None else np.array(arrival, dtype=np.float64),
        prompt_tokens=np.array(prompt, dtype=np.int64),
        output_tokens=np.array(output, dtype=np.int64),
        priority=np.arange(n, dtype=np.int64),
        klass=np.array([f"c{i}" for i in range(n)]),
        prefix_hashes=tuple(np.array([i], dtype=np.int64) for i in range(n)) if hashes else None,
        prefix_block_tokens=512 if hashes else None,
        source="mem.csv", fmt="servesim", dropped={"x": 1},
    )


T = make([0.0, 1.0, 2.0, 4.0], [10, 20, 30, 40], [1, 2, 3, 4], hashes=True)


# ---- transformations -------------------------------------------------------------------

def test_time_scale_and_input_unchanged() -> None:
    new, ch = time_scale(T, 2.0)
    np.testing.assert_array_equal(new.arrival_s, [0, 2, 4, 8])
    np.testing.assert_array_equal(T.arrival_s, [0, 1, 2, 4])  # pure
    assert "1.000 -> 0.500 req/s" in ch.text and new.dropped == {"x": 1}


def test_rate_window_scales_the_window_it_replays_by_hand() -> None:
    a = np.array([0.0, 1.0, 3.0, 6.0, 10.0])  # gaps 1, 2, 3, 4 s
    # 1 req/s for 3 s: the first 3 requests; their span up to the 4th (0 to 6 s) becomes
    # 3 s, every gap halved.
    new, ch = rate_window(a, 1.0, duration_s=3.0)
    assert new.tolist() == [0.0, 0.5, 1.5] and ch.rows_affected == 3
    assert "the first 3 of 5 requests" in ch.text and "x0.5" in ch.text
    # The whole trace at 2 req/s: its span plus one mean gap (12.5 s) becomes 5 / 2 s,
    # so (requests - 1) / (last - first) is exactly the rate asked.
    new, _ = rate_window(a, 2.0)
    np.testing.assert_allclose(new, [0.0, 0.2, 0.6, 1.2, 2.0], rtol=1e-12)
    assert (len(new) - 1) / (new[-1] - new[0]) == pytest.approx(2.0, rel=1e-12)
    # num_requests caps the window: 2 requests, 0 to 3 s made 0.5 s.
    np.testing.assert_allclose(rate_window(a, 4.0, max_rows=2)[0], [0.0, 1 / 6], rtol=1e-12)
    # A trace shorter than rate x duration is replayed whole, at the rate: it ends early.
    new, ch = rate_window(a, 1.0, duration_s=100.0)
    assert len(new) == 5 and new[-1] == pytest.approx(4.0)
    assert "ends before duration_s 100" in ch.text


def test_rate_window_refuses_a_one_row_trace() -> None:
    # Every rate would replay the same lone request: a sweep's points came out equal.
    with pytest.raises(ServesimError, match="the trace has one row, and one request has no "
                                            "rate to rescale"):
        rate_window(np.array([5.0]), 2.0)


def test_rate_window_keeps_the_first_arrival_and_every_request_before_the_end() -> None:
    # A trace starting at 100 s keeps its start; 1.5 s of room holds 1 request at 1 req/s.
    assert rate_window(np.array([100.0, 101.0, 103.0]), 1.0, 101.5)[0].tolist() == [100.0]
    assert len(rate_window(np.array([100.0, 101.0]), 1.0, 100.0)[0]) == 0
    # The 2nd and 3rd requests tie: the window (first 2, up to the 3rd) is 2 s long and
    # the 2nd, mapped onto its end, is kept just inside it.
    new, _ = rate_window(np.array([0.0, 1.0, 1.0, 2.0]), 1.0, 2.0)
    assert len(new) == 2 and new[1] < 2.0 and new[1] == pytest.approx(2.0)
    with pytest.raises(ServesimError, match="same time"):
        rate_window(np.array([5.0, 5.0, 5.0]), 1.0)


def test_target_rate_hits_rate() -> None:
    new, ch = target_rate(T, 10.0)
    a = new.arrival_s
    assert a is not None and len(a) / (a[-1] - a[0]) == pytest.approx(10.0)
    assert ch.op == "target_rate" and ch.rows_affected == 4


def test_window_keeps_half_open_and_rebases() -> None:
    new, ch = window(T, 1.0, 4.0)
    np.testing.assert_array_equal(new.arrival_s, [0.0, 1.0])
    np.testing.assert_array_equal(new.prompt_tokens, [20, 30])
    assert new.klass is not None and list(new.klass) == ["c1", "c2"]
    assert new.prefix_hashes is not None and [h[0] for h in new.prefix_hashes] == [1, 2]
    assert ch.rows_affected == 2
    with pytest.raises(ServesimError, match=r"window \[5, 6\) s holds no rows"):
        window(T, 5.0, 6.0)


def test_sample_exact_count_ordered_seeded() -> None:
    big = make(list(map(float, range(100))), [1] * 100, [1] * 100)
    a, ch = sample(big, 0.3, rng=np.random.default_rng(0))
    b, _ = sample(big, 0.3, rng=np.random.default_rng(0))
    assert len(a) == 30 and ch.rows_affected == 70
    assert a.arrival_s is not None and np.all(np.diff(a.arrival_s) > 0)
    np.testing.assert_array_equal(a.priority, b.priority)
    assert len(sample(big, n=7, rng=np.random.default_rng(1))[0]) == 7
    with pytest.raises(ServesimError, match="sample of 101 rows is impossible"):
        sample(big, n=101, rng=np.random.default_rng(0))


def test_repeat_shift_is_span_plus_mean_gap() -> None:
    new, ch = repeat(T, 3)
    # span 4 s, mean gap 4/3 s -> shift 16/3 s per copy.
    shift = 4 + 4 / 3
    want = [k * shift + x for k in range(3) for x in (0.0, 1.0, 2.0, 4.0)]
    assert new.arrival_s is not None
    np.testing.assert_allclose(new.arrival_s, want)
    assert len(new) == 12 and ch.rows_affected == 8
    assert new.arrival_s is not None and np.all(np.diff(new.arrival_s) > 0)
    lengths, _ = repeat(make(None, [5, 6], [1, 1]), 2)
    np.testing.assert_array_equal(lengths.prompt_tokens, [5, 6, 5, 6])


def test_truncate_rule_and_count() -> None:
    t = make(None, [100, 50, 10, 5], [10, 60, 200, 5])
    new, ch = truncate_to_context(t, 100)
    # 110 -> prompt cut to 90; 110 -> prompt cut to 40; output 200 >= 100 -> 99 + 1; fits.
    np.testing.assert_array_equal(new.prompt_tokens, [90, 40, 1, 5])
    np.testing.assert_array_equal(new.output_tokens, [10, 60, 99, 5])
    assert ch.rows_affected == 3 and "cut 3 of 4 rows (1 of them" in ch.text


def test_truncate_cuts_prefix_hashes_to_the_shorter_prompt() -> None:
    """Truncation had kept every hash id, so a valid trace with prefix hashes was then
    refused for naming more blocks than the (shortened) prompt fills."""
    hashes = tuple(np.arange(k, dtype=np.int64) for k in (4, 2))
    t = dataclasses.replace(make(None, [40, 10], [2, 2]), prefix_hashes=hashes)
    new, ch = truncate_to_context(t, 20, block_tokens=8)  # prompts 18 and 10: 3 and 2 blocks
    assert [h.tolist() for h in new.prefix_hashes] == [[0, 1, 2], [0, 1]]
    assert "1 rows' prefix hashes cut to the blocks the shorter prompt fills" in ch.text
    sized = dataclasses.replace(t, prefix_block_tokens=5)  # the trace's own size wins
    new, _ = truncate_to_context(sized, 20, block_tokens=8)
    assert [len(h) for h in new.prefix_hashes] == [4, 2]


@settings(max_examples=50, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 5000), st.integers(1, 5000)), min_size=1,
                max_size=50), st.integers(2, 4096))
def test_truncate_invariants(rows: list[tuple[int, int]], m: int) -> None:
    t = make(None, [r[0] for r in rows], [r[1] for r in rows])
    new, ch = truncate_to_context(t, m)
    total = new.prompt_tokens + new.output_tokens
    assert np.all(total <= m) and np.all(new.prompt_tokens >= 1)
    assert np.all(new.output_tokens >= 1)
    changed = (new.prompt_tokens != t.prompt_tokens) | (new.output_tokens != t.output_tokens)
    assert ch.rows_affected == int(changed.sum())


def test_time_ops_need_arrivals() -> None:
    with pytest.raises(ServesimError, match="window needs arrival times"):
        window(make(None, [1], [1]), 0, 1)


def test_transforms_from_yaml_fixed_order() -> None:
    spec = build(TraceTransforms, {"max_context": 50, "target_rate_rps": 2.0, "repeat": 2,
                                   "window_s": [1, 100], "sample_n": 3}, "workload.trace")
    new, changes = apply_transforms(T, spec, np.random.default_rng(0))
    assert [c.op for c in changes] == ["window", "sample", "repeat", "target_rate",
                                       "truncate_to_context"]
    a = new.arrival_s
    assert a is not None and len(a) == 6 and len(a) / (a[-1] - a[0]) == pytest.approx(2.0)
    assert np.all(new.prompt_tokens + new.output_tokens <= 50)


@pytest.mark.parametrize("data,pattern", [
    ({"time_scale": 2, "target_rate_rps": 1}, "workload.trace.target_rate_rps: give time_scale"),
    ({"sample_fraction": 1.5}, r"workload.trace.sample_fraction: got 1.5, must be at most 1"),
    ({"window_s": [5, 1]}, r"workload.trace.window_s: got \[5.0, 1.0\], expected"),
    ({"window_s": [-5, 5]}, r"workload.trace.window_s: got \[-5.0, 5.0\], expected \[start_s, "
                            r"end_s\] with 0 <= start < end"),
    ({"repaet": 2}, "unknown key 'repaet'"),
])
def test_transforms_yaml_errors(data: dict[str, object], pattern: str) -> None:
    with pytest.raises(ServesimError, match=pattern):
        build(TraceTransforms, data, "workload.trace")


# ---- stats against the shipped table ---------------------------------------------------

@pytest.mark.parametrize("name,rows,span,rate,cv,pmean,p99,omean,omax", [
    ("azure_2023_code", 8819, 3435.9, 2.567, 13.2, 2047.8, 7436, 27.9, 1899),
    ("azure_2023_conv", 19366, 3501.7, 5.530, 1.09, 1154.7, 4142, 211.1, 1000),
    ("vidur_arxiv_summarization_lengths", 28257, None, None, None, 2588.1, 3933.4, 291.4, 4056),
])
def test_shipped_stats_match_readme(name: str, rows: int, span: float | None,
                                    rate: float | None, cv: float | None, pmean: float,
                                    p99: float, omean: float, omax: int) -> None:
    s = trace_stats(load_trace(find_trace(name, None)))
    assert s["rows"] == rows
    if span is None:
        assert s["span_s"] is None and s["mean_rate_rps"] is None
    else:
        assert s["span_s"] == pytest.approx(span, abs=0.05)
        assert s["mean_rate_rps"] == pytest.approx(rate, abs=5e-4)
        assert cv is not None
        assert s["interarrival_cv"] == pytest.approx(cv, abs=0.05 if cv > 2 else 0.005)
    assert s["prompt_tokens"]["mean"] == pytest.approx(pmean, abs=0.05)
    assert s["prompt_tokens"]["p99"] == pytest.approx(p99, abs=0.05)
    assert s["output_tokens"]["mean"] == pytest.approx(omean, abs=0.05)
    assert s["output_tokens"]["max"] == omax


def test_rate_bins_counts_all_rows() -> None:
    a = np.sort(np.random.default_rng(0).uniform(0, 3600, 5000))
    t, r, w = rate_bins(a)
    assert w == 60.0 and (r * w).sum() == pytest.approx(5000)
    _, r2, w2 = rate_bins(np.array([0.0, 1.0, 2.0]))
    assert w2 == pytest.approx(0.1) and (r2 * w2).sum() == pytest.approx(3)
    # A trace spanning 1e308 s had asked numpy for 1.7e306 one-minute bins (a traceback,
    # or gigabytes for 1e12 s): the span is split into at most 5,000.
    t3, r3, w3 = rate_bins(np.array([0.0, 1.0, 1e308]))
    assert len(t3) == 5000 and w3 == pytest.approx(1e308 / 5000) and (r3 * w3).sum() == 3


# ---- CLI -------------------------------------------------------------------------------

def test_cli_stats_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(FIX / "burstgpt_sample.csv"), "--model", "GPT-4", "--json"]) == 0
    s = json.loads(capsys.readouterr().out)
    assert s["rows"] == 2 and s["format"] == "burstgpt"
    assert s["dropped"] == {"model is not 'GPT-4'": 5, "failed (0 response tokens)": 1}


def test_cli_stats_table(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "azure_2023_conv"]) == 0
    out = capsys.readouterr().out
    assert "19,366" in out and "5.530 req/s" in out and "1.09" in out


def test_cli_help_returns_0(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", "--help"]) == 0
    assert "--format" in capsys.readouterr().out


def test_cli_plot_png(tmp_path: Path) -> None:
    out = tmp_path / "t.png"
    assert main(["plot", str(FIX / "mooncake_sample.jsonl"), "--spread", "--out", str(out)]) == 0
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and out.stat().st_size > 10_000


def test_cli_seed_without_spread_and_a_repeated_option_are_refused(
        capsys: pytest.CaptureFixture[str]) -> None:
    """--seed seeds --spread only, and had been accepted without it, changing nothing;
    an option given twice had kept its last value."""
    trace = str(FIX / "mooncake_sample.jsonl")
    assert main(["stats", trace, "--seed", "5"]) == 2
    assert capsys.readouterr().err == ("servesim: error: --seed: got 5: it seeds --spread, "
                                       "which is not given; add --spread or leave --seed out\n")
    assert main(["stats", trace, "--spread", "--seed", "5"]) == 0
    capsys.readouterr()
    assert main(["stats", trace, "--model", "a", "--model", "b"]) == 2
    assert "--model given twice (--model a and --model b)" in capsys.readouterr().err


@pytest.mark.parametrize("ext", ["png", "pdf", "svg"])
def test_cli_plot_is_the_same_bytes_twice(tmp_path: Path, ext: str) -> None:
    # PDF and SVG carry a creation date (and SVG random ids) unless told not to.
    outs = [tmp_path / f"{name}.{ext}" for name in ("a", "b")]
    for out in outs:
        assert main(["plot", "azure_2023_code", "--out", str(out)]) == 0
    assert outs[0].read_bytes() == outs[1].read_bytes()
    assert b"CreationDate" not in outs[0].read_bytes() and b"<dc:date>" not in outs[0].read_bytes()


@pytest.mark.parametrize("argv,pattern", [
    (["stats", "no_such_trace"], "trace 'no_such_trace' not found"),
    (["stats"], "the following arguments are required: file"),
    (["frobnicate", "x"], "invalid choice: 'frobnicate'"),
    (["stats", "azure_2023_conv", "--format", "azure"], r"line 1: missing column\(s\) TIMESTAMP"),
    (["plot", "azure_2023_conv", "--out", "/no/such/dir/x.png"], "folder for --out"),
])
def test_cli_errors_one_line_exit_2(argv: list[str], pattern: str,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: error: ")
    import re

    assert re.search(pattern, err), err


@pytest.mark.parametrize(("bounds", "note"), [
    ({"duration_s": 2.5}, "replayed the first 3 of 5 rows (those arriving before "
                          "duration_s = 2.5 s)"),
    ({"num_requests": 2}, "replayed the first 2 of 5 rows (num_requests = 2)"),
    ({"duration_s": 2.5, "num_requests": 4},
     "replayed the first 3 of 5 rows (those arriving before duration_s = 2.5 s)"),
    ({"duration_s": 3.5, "num_requests": 2}, "replayed the first 2 of 5 rows "
                                             "(num_requests = 2)"),
    ({"num_requests": 5}, None),
    ({"duration_s": 9}, None),
    ({"num_requests": 1000}, "num_requests = 1000, but the trace holds 5 rows to replay: "
                             "all 5 replayed"),
    # A rate window says itself which rows it replays (here 2, to arrive before 2.5 s).
    ({"num_requests": 1000, "duration_s": 2.5, "trace": {"target_rate": 1.0}}, None),
])
def test_a_trace_cut_short_says_how_many_rows_it_replays(tmp_path: Path, bounds: dict,
                                                         note: str | None) -> None:
    from sim.config.scenario import from_dict
    from sim.workload.build import build_requests

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{t},8,2\n" for t in range(5)))
    bounds = dict(bounds)
    extra = bounds.pop("trace", {})
    sc = from_dict({"model": "tiny", "workload": {"trace": {"path": str(trace), **extra},
                                                  **bounds}}, "<test>")
    req = build_requests(sc.workload, None, np.random.default_rng(0))
    cut = [n for n in req.notes if n.startswith(("replayed the first", "num_requests"))]
    assert cut == ([] if note is None else [note])
    assert len(req.arrival_s) == (int(note.split()[3]) if note and "first" in note
                                  else 2 if extra else 5)


@pytest.mark.parametrize("extra, key, pattern", [
    ({"time_scale": 1e308}, "time_scale", r"x1e\+308 takes the arrival times past a float"),
    ({"time_scale": 5e-324}, "time_scale", "into one instant"),
    ({"sample_n": 1000}, "sample_n", r"sample of 1000 rows is impossible .*t\.csv\)"),
    ({"sample_fraction": 1e-300}, "sample_fraction", "sample of 0 rows"),
    ({"window_s": [100, 200]}, "window_s", "holds no rows"),
    ({"start_row": 5}, "start_row", r"got 5, but .*t\.csv has 5 rows"),
    ({"spread": True}, "spread", "the options of that format: prefix_block_tokens"),
])
def test_a_trace_key_the_trace_cannot_take_is_named_in_the_scenario(
        tmp_path: Path, extra: dict, key: str, pattern: str) -> None:
    # The value to change is the scenario's key: the error names the scenario file and
    # workload.trace.<key>, the trace file only in its words (an overflowing time scale
    # once replayed a lone request, its rate printed as inf).
    from sim.config.scenario import from_dict
    from sim.workload.build import build_requests

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{t},8,2\n" for t in range(5)))
    sc = from_dict({"model": "tiny", "workload": {"trace": {"path": str(trace), **extra},
                                                  "duration_s": 900}}, "<test>")
    with pytest.raises(ServesimError, match=pattern) as e:
        build_requests(sc.workload, None, np.random.default_rng(0), source="s.yaml")
    assert (e.value.source, e.value.where) == ("s.yaml", f"workload.trace.{key}")


def test_cli_names_the_flag_a_format_does_not_take(tmp_path: Path,
                                                  capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["stats", str(FIX / "azure_2023_sample.csv"), "--spread"]) == 2
    err = capsys.readouterr().err
    assert "--spread: applies to mooncake traces only" in err and "prefix_block" not in err
