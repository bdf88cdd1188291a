"""Trace loaders: every format, sniffing, shipped traces, and one-line errors on bad input."""

from __future__ import annotations

import gzip
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sim.errors import ServesimError
from sim.workload import traceio
from sim.workload.traces import (
    FORMATS,
    find_trace,
    load_trace,
    shipped_traces,
    sniff_format,
    spread_buckets,
)

FIX = Path(__file__).parent / "fixtures" / "traces"
ROOT = Path(__file__).resolve().parents[1]


def write(tmp_path: Path, text: str, name: str = "t.csv") -> Path:
    p = tmp_path / name
    p.write_text(text)
    return p


# ---- formats -------------------------------------------------------------------------

def test_servesim_all_columns_and_offsets_kept() -> None:
    t = load_trace(FIX / "servesim_full.csv")
    assert t.fmt == "servesim"
    # servesim arrivals are used as written: not rebased to 0.
    np.testing.assert_array_equal(t.arrival_s, [0.5, 0.5, 1.25, 2.0])
    assert t.arrival_s is not None and t.arrival_s.dtype == np.float64
    np.testing.assert_array_equal(t.prompt_tokens, [100, 200, 300, 400])
    assert t.prompt_tokens.dtype == np.int64 and t.output_tokens.dtype == np.int64
    np.testing.assert_array_equal(t.priority, [0, 1, -1, 2])
    assert t.klass is not None and list(t.klass) == ["chat", "code", "chat", "batch"]
    assert t.prefix_hashes is not None
    assert [h.tolist() for h in t.prefix_hashes] == [[1, 2, 3], [1, 2], [], [7, 8]]
    assert t.prefix_block_tokens is None  # the KV block size, as vLLM hashes its blocks
    assert t.dropped == {} and t.source == str(FIX / "servesim_full.csv")


def test_servesim_prefix_block_tokens_option() -> None:
    t = load_trace(FIX / "servesim_full.csv", prefix_block_tokens=16)
    assert t.prefix_block_tokens == 16


def test_azure_2023_seven_fractional_digits() -> None:
    t = load_trace(FIX / "azure_2023_sample.csv")
    assert t.fmt == "azure"
    assert t.arrival_s is not None
    np.testing.assert_allclose(t.arrival_s, [0.0, 0.052, 0.098189, 0.098189, 60.0000001],
                               rtol=0, atol=1e-9)
    np.testing.assert_array_equal(t.prompt_tokens, [4808, 3180, 110, 7, 1020])
    np.testing.assert_array_equal(t.output_tokens, [10, 8, 27, 1, 129])
    assert t.priority is None and t.klass is None and t.prefix_hashes is None


def test_azure_2024_utc_offsets_applied() -> None:
    t = load_trace(FIX / "azure_2024_sample.csv", "azure")
    assert t.arrival_s is not None
    # 01:00:01+01:00 is 00:00:01 UTC, so the file is in time order.
    np.testing.assert_allclose(t.arrival_s, [0.0, 0.508345, 0.996, 1.996], atol=1e-9)


def test_burstgpt_filters_and_failed_rows_counted() -> None:
    t = load_trace(FIX / "burstgpt_sample.csv")
    assert t.fmt == "burstgpt" and len(t) == 6
    assert t.dropped == {"failed (0 response tokens)": 2}
    assert t.arrival_s is not None and t.arrival_s[0] == 0.0  # rebased to first kept row
    t = load_trace(FIX / "burstgpt_sample.csv", model="ChatGPT", log_type="Conversation log")
    np.testing.assert_array_equal(t.arrival_s, [0.0, 40.0, 256.0])
    np.testing.assert_array_equal(t.prompt_tokens, [472, 1087, 37])
    assert t.dropped == {"model is not 'ChatGPT'": 3, "log_type is not 'Conversation log'": 1,
                         "failed (0 response tokens)": 1}
    assert len(t) + sum(t.dropped.values()) == 8  # every row accounted for


def test_burstgpt_unknown_model_names_the_models_seen() -> None:
    with pytest.raises(ServesimError, match=r"'gpt-4' matches no row.*'ChatGPT', 'GPT-4'"):
        load_trace(FIX / "burstgpt_sample.csv", model="gpt-4")


def test_burstgpt_unknown_model_lists_a_few_models_quoted(tmp_path: Path) -> None:
    """A file of 5,000 models had listed them all on one 314 KB line, and a model's
    control characters (an ESC colouring the terminal) went to it raw."""
    rows = [f"{i},model-{i:04d},10,20,30,Conversation log" for i in range(500)]
    rows.append("600,a\x1b[31mRED,10,20,30,Conversation log")
    path = tmp_path / "b.csv"
    path.write_text("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
                    + "\n".join(rows) + "\n")
    with pytest.raises(ServesimError) as err:
        load_trace(path, model="nope")
    # Sorted: the escape-coloured model first, quoted with its ESC escaped.
    listed = ", ".join(["'a\\x1b[31mRED'", *(f"'model-{i:04d}'" for i in range(19))])
    assert str(err.value) == (f"{path}: model 'nope' matches no row; the file has: {listed} "
                              "and 481 more")
    assert "\x1b" not in str(err.value)


def test_mooncake_hashes_and_rebase() -> None:
    t = load_trace(FIX / "mooncake_sample.jsonl")
    assert t.fmt == "mooncake" and t.prefix_block_tokens == 512
    np.testing.assert_array_equal(t.arrival_s, [0, 0, 0, 3, 6, 6])
    assert t.prefix_hashes is not None and t.prefix_hashes[3].tolist() == [0, 1, 5, 6]


def test_mooncake_spread_within_buckets_seeded() -> None:
    path = FIX / "mooncake_sample.jsonl"
    a = load_trace(path, spread=True, rng=np.random.default_rng(1)).arrival_s
    b = load_trace(path, spread=True, rng=np.random.default_rng(1)).arrival_s
    c = load_trace(path, spread=True, rng=np.random.default_rng(2)).arrival_s
    assert a is not None and b is not None and c is not None
    np.testing.assert_array_equal(a, b)
    assert not np.array_equal(a, c)
    assert a[0] == 0.0 and np.all(np.diff(a) > 0)


def test_spread_buckets_bounds() -> None:
    raw = np.array([0, 0, 0, 3, 6, 6.0])
    for seed in range(20):
        s = spread_buckets(raw, np.random.default_rng(seed))
        assert np.all(np.diff(s) >= 0)
        # Each bucket stays within [its time, next distinct time); the last bucket gets
        # the mean distinct-timestamp gap, 3 s.
        assert np.all((s[:3] >= 0) & (s[:3] < 3)) and 3 <= s[3] < 6
        assert np.all((s[4:] >= 6) & (s[4:] < 9))
    one = np.array([5.0, 5.0])
    np.testing.assert_array_equal(spread_buckets(one, np.random.default_rng(0)), one)


def test_spread_over_one_timestamp_is_refused(tmp_path: Path) -> None:
    """Rows that all share a timestamp had been left together without a word: there is
    no later timestamp or mean gap to spread them over (target_rate refuses them too)."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"timestamp": 7, "input_length": 5, "output_length": 1}\n' * 3)
    with pytest.raises(ServesimError, match=re.escape(
            f"{path}: spread: every row has the same timestamp, so there is no gap to "
            "spread the rows over; leave spread out")):
        load_trace(path, "mooncake", spread=True, rng=np.random.default_rng(0))
    assert len(load_trace(path, "mooncake")) == 3


def test_spread_needs_rng() -> None:
    with pytest.raises(ServesimError, match="spread needs a seeded"):
        load_trace(FIX / "mooncake_sample.jsonl", spread=True)


def test_lengths_vidur_names_extra_column_ignored() -> None:
    t = load_trace(FIX / "vidur_lengths.csv")
    assert t.fmt == "lengths" and t.arrival_s is None
    np.testing.assert_array_equal(t.output_tokens, [54, 156, 4056])


def test_gzip_file(tmp_path: Path) -> None:
    p = tmp_path / "t.csv.gz"
    with gzip.open(p, "wt") as fh:
        fh.write("arrival_s,prompt_tokens,output_tokens\n0,5,6\n1.5,7,8\n")
    t = load_trace(p)
    np.testing.assert_array_equal(t.arrival_s, [0, 1.5])


def test_crlf_and_bom(tmp_path: Path) -> None:
    p = tmp_path / "t.csv"
    p.write_bytes(b"\xef\xbb\xbfTIMESTAMP,ContextTokens,GeneratedTokens\r\n"
                  b"2023-11-16 18:17:03.9799600,5,6\r\n2023-11-16 18:17:04.9799600,7,8\r\n")
    t = load_trace(p)
    assert t.fmt == "azure" and t.arrival_s is not None
    np.testing.assert_allclose(t.arrival_s, [0.0, 1.0])


def test_chunk_borders_checked(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(traceio, "CHUNK_ROWS", 3)
    rows = "".join(f"{i},{i + 1},1\n" for i in range(10))
    t = load_trace(write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n" + rows))
    assert len(t) == 10 and t.prompt_tokens[-1] == 10
    # Out-of-order row at the start of the third chunk (file line 8).
    bad = rows.replace("6,7,1\n", "1,7,1\n")
    with pytest.raises(ServesimError, match=r"line 8: arrival 1\.0 s is earlier than .* 5\.0 "
                                            r"s; .* \(a scenario's workload\.trace\.sort: true; "
                                            r"--sort on servesim trace\)$"):
        load_trace(write(tmp_path, "arrival_s,prompt_tokens,output_tokens\n" + bad))


def test_sort_true_is_stable(tmp_path: Path) -> None:
    p = write(tmp_path, "arrival_s,prompt_tokens,output_tokens,class\n"
                        "2,1,1,a\n1,2,1,b\n2,3,1,c\n1,4,1,d\n")
    t = load_trace(p, sort=True)
    np.testing.assert_array_equal(t.prompt_tokens, [2, 4, 1, 3])
    assert t.klass is not None and list(t.klass) == ["b", "d", "a", "c"]


def test_sort_rebases_azure_to_earliest(tmp_path: Path) -> None:
    p = write(tmp_path, "TIMESTAMP,ContextTokens,GeneratedTokens\n"
                        "2023-11-16 18:17:05,1,1\n2023-11-16 18:17:03,2,1\n"
                        "2023-11-16 18:17:04.5,3,1\n")
    t = load_trace(p, sort=True)
    assert t.arrival_s is not None
    np.testing.assert_allclose(t.arrival_s, [0.0, 1.5, 2.0])
    np.testing.assert_array_equal(t.prompt_tokens, [2, 3, 1])


def test_sort_carries_prefix_hashes(tmp_path: Path) -> None:
    p = write(tmp_path, "arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n"
                        "3,1,1,1 2\n1,2,1,3\n")
    t = load_trace(p, sort=True)
    assert t.prefix_hashes is not None
    assert [h.tolist() for h in t.prefix_hashes] == [[3], [1, 2]]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.floats(0, 1e6, allow_nan=False), st.integers(1, 10**6),
                          st.integers(1, 10**6)), min_size=1, max_size=40))
def test_servesim_roundtrip(rows: list[tuple[float, int, int]]) -> None:
    rows = sorted(rows, key=lambda r: r[0])
    import tempfile

    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / "t.csv"
        p.write_text("arrival_s,prompt_tokens,output_tokens\n"
                     + "".join(f"{a!r},{x},{y}\n" for a, x, y in rows))
        t = load_trace(p)
    np.testing.assert_array_equal(t.arrival_s, [r[0] for r in rows])
    np.testing.assert_array_equal(t.prompt_tokens, [r[1] for r in rows])
    np.testing.assert_array_equal(t.output_tokens, [r[2] for r in rows])


# ---- bad input -------------------------------------------------------------------------

HDR = "arrival_s,prompt_tokens,output_tokens\n"


@pytest.mark.parametrize("text,pattern", [
    (HDR + "0,1,1\n2,1,1\n1,1,1\n", r"t\.csv: line 4: arrival 1\.0 s is earlier"),
    (HDR + "0,1,1\nnan,1,1\n", r"line 3: arrival_s = 'nan'; must be a finite time >= 0"),
    (HDR + "-1,1,1\n", r"line 2: arrival_s = '-1'; must be a finite time"),
    (HDR + "0,0,1\n", r"line 2: prompt_tokens = '0'; must be a whole number >= 1"),
    (HDR + "0,5,-3\n", r"line 2: output_tokens = '-3'; must be a whole number >= 1"),
    (HDR + "0,99999999999999999999,5\n",
     r"line 2: prompt_tokens = '99999999999999999999'; must be a whole number >= 1 and below "
     r"2\*\*53"),
    # 2**53 + 1 reads as the float 2**53: had passed an "at most 2**53" rule, rounded.
    (HDR + "0,10,5\n1,9007199254740993,5\n", r"line 3: prompt_tokens = '9007199254740993'; "
     r"must be a whole number >= 1 and below 2\*\*53"),
    (HDR + "0,5,2.5\n", r"line 2: output_tokens = '2.5'; must be a whole number"),
    (HDR + "0,5,nan\n", r"line 2: output_tokens = 'nan'; must be a whole number"),
    (HDR + "0,5,1\n1,abc,1\n", r"line 3: prompt_tokens = 'abc' is not a number"),
    # Python's digit grouping had been read: 1_0 as 10, 1_000 as 1000.
    (HDR + "0,5,1\n1_0,1000,1\n", r"^[^\n]*t\.csv: line 3: arrival_s = '1_0' is not a "
     r"number written in ASCII digits alone \(0-9, no _ between them\)$"),
    (HDR + "0,1_000,1\n", r"line 2: prompt_tokens = '1_000' is not a number written in "
     r"ASCII digits alone"),
    # Another script's digits had been read as numbers: Arabic-Indic 512, full-width 1.
    (HDR + "0,\u0665\u0661\u0662,1\n", r"line 2: prompt_tokens = '\u0665\u0661\u0662' is "
     r"not a number written in ASCII digits alone"),
    (HDR + "0,5,1\n\uff11,5,1\n", r"line 3: arrival_s = '\uff11' is not a number written "
     r"in ASCII digits alone"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,5,1,1 1_0\n",
     r"line 2: prefix_hash_ids has '1_0'; expected integers"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,5,1,1 \u0661\n",
     r"line 2: prefix_hash_ids has '\u0661'; expected integers"),
    (HDR + "0,5,1\n1,,1\n", r"line 3: prompt_tokens = '' is not a number"),
    (HDR + "0,5\n", r"line 2: 2 fields, expected 3"),
    ("arrival_s,prompt_tokens\n0,5\n", r"line 1: missing column\(s\) output_tokens"),
    ("arival_s,prompt_tokens,output_tokens\n0,5,1\n", r"line 1: unknown column 'arival_s'"),
    ("arrival,prompt,output\n0,5,1\n", r"line 1: cannot tell the trace format from 'arrival,"),
    ("arrival_s,prompt_tokens,output_tokens,priorty\n0,5,1,1\n", r"unknown column 'priorty'"),
    ("prompt_tokens,output_tokens,arival\n5,1,0\n", r"unknown column 'arival'"),
    # Arrivals in another unit or name make the file one of lengths alone: say so.
    ("arrival_ms,prompt_tokens,output_tokens\n0,5,1\n",
     r"unknown column 'arrival_ms'; allowed: prompt_tokens, output_tokens \(a file of "
     r"lengths alone; a trace with arrival times gives them as arrival_s, in seconds"),
    (HDR + "0,5,1,\n", r"line 2: 4 fields, expected 3"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,5,1,1 x\n",
     r"line 2: prefix_hash_ids has 'x'"),
    # An empty item between ';' (an id lost) had been dropped: "1;;;;2" read as 2 ids.
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,32,1,1;2\n0,32,1,\"1;;;;2\"\n",
     r"line 3: prefix_hash_ids has an empty item in '1;;;;2'; expected integers separated"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,32,1,;\n",
     r"line 2: prefix_hash_ids has an empty item in ';'"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,32,1,1;2;\n",
     r"line 2: prefix_hash_ids has an empty item in '1;2;'"),
    ("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n0,5,1,1\n1,5,1,2 "
     "99999999999999999999\n",
     r"line 3: prefix_hash_ids has '99999999999999999999'; expected integers from -2\*\*63"),
    (HDR + "0,5,1\n1,5," + "9" * 200_000 + "\n",
     r"line 3: not readable as CSV: field larger than field limit"),
    # An unclosed quote is named on its own line, not the chunk's first line (2) or where
    # the csv module's field limit ran out, thousands of lines on.
    (HDR + "0,100,20\n0.5,100,20\n1,100,20\n1.5,\"100,20\n2,100,20\n",
     r"t\.csv: line 5: a quoted field opens on this line and does not close "
     r"\('1\.5,\"100,20'\); quoted fields spanning lines are not supported$"),
    (HDR + "".join(f"{i},5,1\n" for i in range(10)) + "10,\"5,1\n"
     + "".join(f"{i},5,1\n" for i in range(11, 20_000)),
     r"t\.csv: line 12: a quoted field opens on this line and does not close"),
    (HDR + "0,5,1\n1,\"5,1\n", r"t\.csv: line 3: a quoted field opens on this line"),
    ("arrival_s,prompt_tokens,output_tokens,class\n0,5,1,chat\n1,5,1, \n",
     r"line 3: class is empty; every row names its class"),
    ("", r"t\.csv: line 1: the trace file is empty"),
    ("\n\n", r"the trace file is empty"),
    (HDR, r"t\.csv: the trace has no rows"),
])
def test_bad_servesim_input(tmp_path: Path, text: str, pattern: str) -> None:
    with pytest.raises(ServesimError, match=pattern) as exc:
        load_trace(write(tmp_path, text))
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize("fmt,text,pattern", [
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,5,x\n",
     r"line 2: GeneratedTokens = 'x' is not a number"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,5,1\n"
     "yesterday,5,1\n", r"line 3: TIMESTAMP = 'yesterday' is not a date-time"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03.97,5,1\n"
     "2023-11-16 18:17:02,5,1\n",
     r"line 3: arrival -1\.97 s after the first row's TIMESTAMP is earlier"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n1700000000,374,44\n",
     r"line 2: TIMESTAMP = '1700000000' is not a date-time like '2023-11-16 18:17:03\.9799600' "
     r"\(epoch numbers are not read\)"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03,5,1\n20231116,5,1\n",
     r"line 3: TIMESTAMP = '20231116' is not a date-time"),
    ("azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-16 18:17:03+25:99,5,1\n",
     r"line 2: TIMESTAMP = '2023-11-16 18:17:03\+25:99' has UTC offset \+25:99; offsets run"),
    ("azure", "TIMESTAMP,Context,GeneratedTokens\n2023-11-16 18:17:03,5,1\n",
     r"line 1: missing column\(s\) ContextTokens"),
    ("burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
     "5,ChatGPT,0,3,3,API log\n", r"line 2: Request tokens = '0'; must be a whole number >= 1"),
    ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1}\n{"timestamp": 1}\n',
     r"line 2: expected an object with keys timestamp, input_length, output_length"),
    ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1}\nnot json\n',
     r"line 2: not a JSON object"),
    ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 0}\n',
     r"line 1: output_length = 0; must be a whole number >= 1"),
    ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": "a"}\n',
     r"line 1: hash_ids = 'a'; expected a list of integers"),
    ("mooncake", '{"timestamp": 0, "input_length": 5, "output_length": 1, '
     '"hash_ids": [99999999999999999999]}\n',
     r"line 1: hash_ids = '\[99999999999999999999\]'; expected a list of integers from"),
    ("mooncake", '{"timestamp": [1, 2], "input_length": 5, "output_length": 1}\n',
     r"line 1: timestamp = \[1, 2\] is not a number"),
    ("mooncake", '{"timestamp": 0, "input_length": true, "output_length": 1}\n',
     r"line 1: input_length = True is not a number"),
    ("mooncake", '{"timestamp": "5", "input_length": 8, "output_length": 1}\n',
     r"line 1: timestamp = '5' is not a number"),
    ("lengths", "prompt_tokens,output_tokens\n5,1\n5,1.5\n",
     r"line 3: output_tokens = '1.5'; must be a whole number"),
])
def test_bad_input_other_formats(tmp_path: Path, fmt: str, text: str, pattern: str) -> None:
    with pytest.raises(ServesimError, match=pattern):
        load_trace(write(tmp_path, text), fmt)


def test_unknown_format_lists_valid(tmp_path: Path) -> None:
    with pytest.raises(ServesimError, match="unknown trace format 'csv'; valid formats: "
                       "servesim, azure, burstgpt, mooncake, lengths"):
        load_trace(write(tmp_path, HDR + "0,1,1\n"), "csv")


def test_option_not_for_format(tmp_path: Path) -> None:
    # At the option's key, so a scenario names workload.trace.model, not the trace file.
    with pytest.raises(ServesimError, match="a trace of format 'azure'") as e:
        load_trace(FIX / "azure_2023_sample.csv", model="x")
    assert e.value.where == "model" and e.value.source is None


def test_missing_file_and_directory(tmp_path: Path) -> None:
    with pytest.raises(ServesimError, match=r"nope\.csv: no such trace file"):
        load_trace(tmp_path / "nope.csv")
    with pytest.raises(ServesimError, match="is a directory"):
        load_trace(tmp_path, "servesim")


def test_blank_lines_skipped_but_line_numbers_kept(tmp_path: Path) -> None:
    p = write(tmp_path, HDR + "0,1,1\n\n\n1,0,1\n")
    with pytest.raises(ServesimError, match="line 5: prompt_tokens = '0'"):
        load_trace(p)


def test_sniff() -> None:
    assert sniff_format(FIX / "azure_2023_sample.csv") == "azure"
    assert sniff_format(FIX / "burstgpt_sample.csv") == "burstgpt"
    assert sniff_format(FIX / "mooncake_sample.jsonl") == "mooncake"
    assert sniff_format(FIX / "servesim_full.csv") == "servesim"
    assert sniff_format(FIX / "vidur_lengths.csv") == "lengths"
    assert set(FORMATS) == {"servesim", "azure", "burstgpt", "mooncake", "lengths"}


# ---- find_trace and shipped files ------------------------------------------------------

def test_find_trace_shipped_and_relative(tmp_path: Path) -> None:
    assert shipped_traces() == ["azure_2023_code", "azure_2023_conv",
                                "vidur_arxiv_summarization_lengths"]
    p = find_trace("azure_2023_conv", None)
    assert p.name == "azure_2023_conv.csv" and p.is_file()
    assert find_trace("azure_2023_conv.csv", tmp_path) == p
    (tmp_path / "mine.csv").write_text(HDR + "0,1,1\n")
    assert find_trace("mine.csv", tmp_path) == tmp_path / "mine.csv"
    # A local file wins over a shipped trace of the same name.
    (tmp_path / "azure_2023_conv").write_text(HDR + "0,1,1\n")
    assert find_trace("azure_2023_conv", tmp_path) == tmp_path / "azure_2023_conv"


def test_find_trace_unknown_lists_shipped(tmp_path: Path) -> None:
    with pytest.raises(ServesimError, match="trace 'azure_conv' not found.*shipped traces: "
                       "azure_2023_code, azure_2023_conv, vidur_arxiv_summarization_lengths"):
        find_trace("azure_conv", tmp_path)


def test_a_folder_given_as_the_trace_is_named_as_one(tmp_path: Path) -> None:
    (tmp_path / "traces.csv").mkdir()
    with pytest.raises(ServesimError, match=r"trace 'traces.csv' is a folder \('.*traces.csv'\); "
                                            "name a trace file in it"):
        find_trace("traces.csv", tmp_path)


def test_shipped_data_has_licences_and_readme() -> None:
    d = ROOT / "sim" / "data" / "traces"
    assert (d / "LICENSES" / "CC-BY-4.0.txt").is_file()
    assert (d / "LICENSES" / "MIT_vidur.txt").is_file()
    text = (d / "README.md").read_text()
    assert "Splitwise" in text and "CC-BY-4.0" in text and "MIT" in text


def test_traces_module_imports_no_simpy_or_matplotlib() -> None:
    code = ("import sys, sim.workload.traces, sim.workload.tracetools, "
            "sim.workload.tracestats, sim.workload.cli; "
            "bad = [m for m in ('simpy', 'matplotlib') if m in sys.modules]; print(bad)")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_scenarios_trace_sets_the_tokens_each_prefix_hash_covers(tmp_path: Path) -> None:
    """workload.trace.prefix_block_tokens: 32-token hashes over 16-token KV blocks share
    both blocks of a 32-token prefix; left unset, each hash is one 16-token block."""
    from sim.config.scenario import from_dict
    from sim.core.engine import simulate
    from sim.report.summary import summarize

    trace = tmp_path / "t.csv"
    trace.write_text("arrival_s,prompt_tokens,output_tokens,prefix_hash_ids\n"
                     "0,64,2,1 2\n1,64,2,1 3\n")

    def hits(**more: int) -> int:
        raw = {"model": "tiny", "cost": {"linear": {"step_s": 0.01}},
               "serving": {"prefix_caching": True},
               "workload": {"trace": {"path": str(trace), **more}}}
        return summarize(simulate(from_dict(raw, "<t>")))["prefix_cache"]["hit_tokens"]

    assert hits() == 16 and hits(prefix_block_tokens=32) == 32
    with pytest.raises(ServesimError, match="workload.trace.prefix_block_tokens: got 0"):
        from_dict({"model": "tiny", "workload": {"trace": {"path": str(trace),
                                                           "prefix_block_tokens": 0}}}, "<t>")


def test_a_column_named_twice_in_the_header_is_an_error(tmp_path: Path) -> None:
    p = write(tmp_path, "arrival_s,arrival_s,prompt_tokens,output_tokens\n0,1,5,5\n")
    with pytest.raises(ServesimError, match=r"line 1: column\(s\) arrival_s given twice in the "
                                            "header"):
        load_trace(p)


def test_mooncake_hash_ids_cannot_name_more_blocks_than_the_prompt_fills(
        tmp_path: Path) -> None:
    p = tmp_path / "m.jsonl"
    p.write_text('{"timestamp": 0, "input_length": 600, "output_length": 5, "hash_ids": [1, 2]}\n'
                 '{"timestamp": 1, "input_length": 10, "output_length": 5, "hash_ids": [1, 2]}\n')
    with pytest.raises(ServesimError, match="line 2: hash_ids names 2 blocks of 512 tokens for "
                                            "an input_length of 10: at most 1"):
        load_trace(p)


def test_the_first_bad_row_is_named_whatever_its_fault(tmp_path: Path) -> None:
    # A fractional priority on line 2 and a word on line 3: line 3 had been named first
    # (numbers are parsed before they are judged whole).
    head = "arrival_s,prompt_tokens,output_tokens,priority\n"
    with pytest.raises(ServesimError, match=r"line 2: priority = '1\.5'; must be a whole"):
        load_trace(write(tmp_path, head + "0,10,2,1.5\n1,10,2,x\n"))
    with pytest.raises(ServesimError, match=r"line 2: arrival_s = '-1'; must be a finite"):
        load_trace(write(tmp_path, head + "-1,10,2,0\nx,10,2,0\n"))
    with pytest.raises(ServesimError, match=r"line 3: priority = 'x' is not a number"):
        load_trace(write(tmp_path, head + "0,10,2,1\n1,10,2,x\n"))


@pytest.mark.parametrize("first, second, bad, line", [
    ("2000-01-01 00:00:00.000000", "2584-07-20 23:34:34.709553", "2584-07-20 23:34:34.709553", 3),
    ("9999-12-31 23:59:59", "9999-12-31 23:59:59", "9999-12-31 23:59:59", 2),
    ("1600-01-01 00:00:00", "1600-01-01 00:00:01", "1600-01-01 00:00:00", 2),
    ("2262-04-11 23:47:17", "2262-04-11 23:47:18", "2262-04-11 23:47:17", 2),
])
def test_azure_times_outside_int64_nanoseconds_are_refused(tmp_path: Path, first: str,
                                                           second: str, bad: str,
                                                           line: int) -> None:
    """numpy wraps a datetime64[ns] past 2262 (or before 1677) without an error: 584
    years apart had been read as 1 s apart. Such a time is refused on its line."""
    path = tmp_path / "az.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n{first},100,20\n"
                    f"{second},200,30\n")
    with pytest.raises(ServesimError) as err:
        load_trace(path, "azure")
    assert str(err.value) == (f"{path}: line {line}: TIMESTAMP = '{bad}' is outside the years "
                              "1678 to 2261 that are read (nanoseconds since 1970 in 64 bits)")


@pytest.mark.parametrize("day", ["1678-01-01", "2261-12-31"])
def test_azure_times_at_the_edges_of_the_years_read(tmp_path: Path, day: str) -> None:
    path = tmp_path / "az.csv"
    path.write_text(f"TIMESTAMP,ContextTokens,GeneratedTokens\n{day} 00:00:00,100,20\n"
                    f"{day} 00:00:02.5,200,30\n")
    assert list(load_trace(path, "azure").arrival_s) == [0.0, 2.5]


def test_an_azure_span_past_the_arrival_bound_is_refused(tmp_path: Path) -> None:
    """Two years the reader takes, 583 years apart: the int64 difference would wrap."""
    path = tmp_path / "az.csv"
    path.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n1678-01-01 00:00:00,100,20\n"
                    "2261-12-31 23:59:59,200,30\n")
    with pytest.raises(ServesimError) as err:
        load_trace(path, "azure")
    assert str(err.value) == (f"{path}: line 3: TIMESTAMP = '2261-12-31 23:59:59' is "
                              "1.843e+10 s from the first row's; arrivals are read up to "
                              "1e+09 s (31 years)")


@pytest.mark.parametrize("header, fmt", [
    ('"arrival_s","prompt_tokens","output_tokens"', "servesim"),
    ('"TIMESTAMP","ContextTokens","GeneratedTokens"', "azure"),
    ('"prompt_tokens","output_tokens"', "lengths"),
])
def test_a_quoted_header_is_sniffed_as_it_is_read(tmp_path: Path, header: str,
                                                  fmt: str) -> None:
    """pandas' QUOTE_ALL and spreadsheet exports quote the header: the format is told
    from the columns the CSV reader sees (it had said it cannot tell the format)."""
    path = tmp_path / "q.csv"
    row = "2023-11-16 18:15:46,100,20" if fmt == "azure" else (
        "100,20" if fmt == "lengths" else "0,100,20")
    path.write_text(f"{header}\n{row}\n")
    assert sniff_format(path) == fmt
    assert len(load_trace(path).prompt_tokens) == 1
