"""Damaged result folders and bad ``trace plot --out`` paths: one error line, exit status 2.

Each case copies a real folder of ``simulate``, ``compare``, ``sweep`` or ``capacity``,
breaks one file the way a hand edit or a cut-short copy would, and checks that
``servesim report`` names the file, the key (or line and column), the value and what
belongs there, instead of a ``KeyError`` traceback or a report of nonsense.
"""

from __future__ import annotations

import errno
import json
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from sim.cli import main as cli_main
from sim.errors import ServesimError
from sim.study.reportdoc import collect
from sim.workload import cli as trace_cli

ROOT = Path(__file__).resolve().parents[1]
MD1 = ROOT / "scenarios" / "capacity-md1.yaml"
TRACE = ROOT / "tests" / "fixtures" / "traces" / "mooncake_sample.jsonl"
SMALL = ["--set", "workload.num_requests=100", "--no-plots"]
KINDS = ("simulate", "compare", "sweep", "capacity")
MAIN = {"simulate": "summary.json", "compare": "compare.json", "sweep": "sweep.json",
        "capacity": "capacity.json"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory: Any) -> dict[str, Path]:
    """One small, valid folder of each command (no plots: the report is what is tested)."""
    base = tmp_path_factory.mktemp("good")
    out = {k: base / k for k in KINDS}
    runs = [
        ["simulate", str(MD1), *SMALL, "--out", str(out["simulate"]), "--quiet"],
        ["compare", str(MD1), *SMALL, "--policies", "static,chunked", "--out",
         str(out["compare"])],
        ["sweep", str(MD1), *SMALL, "--rates", "20,80", "--slo", "ttft_p99=0.15",
         "--slo", "e2e_p90=1", "--workers", "1", "--out", str(out["sweep"]), "--quiet"],
        ["capacity", str(MD1), *SMALL, "--slo", "ttft_mean=0.05", "--seeds", "1", "--tol",
         "0.1", "--target-rate", "40", "--workers", "1", "--out", str(out["capacity"]),
         "--quiet"],
    ]
    for argv in runs:
        assert cli_main(argv) == 0
    return out


def broken(folders: dict[str, Path], tmp_path: Path, kind: str,
           damage: Callable[[Path], None]) -> Path:
    """A copy of the ``kind`` folder with ``damage`` done to it."""
    folder = tmp_path / kind
    shutil.copytree(folders[kind], folder)
    damage(folder)
    return folder


def edit_json(name: str, change: Callable[[Any], Any]) -> Callable[[Path], None]:
    """Damage: rewrite ``name`` as ``change`` of its parsed content."""
    def damage(folder: Path) -> None:
        path = folder / name
        path.write_text(json.dumps(change(json.loads(path.read_text()))))
    return damage


def write(name: str, text: str) -> Callable[[Path], None]:
    """Damage: replace ``name`` by ``text``."""
    return lambda folder: (folder / name).write_text(text)


def set_key(path: str, value: Any) -> Callable[[Any], Any]:
    """A change setting the dotted ``path`` (list items by index) to ``value``."""
    def change(blob: Any) -> Any:
        *parents, last = path.split(".")
        d = blob
        for k in parents:
            d = d[int(k)] if isinstance(d, list) else d[k]
        d[int(last) if isinstance(d, list) else last] = value
        return blob
    return change


def drop_stat(blob: dict[str, Any]) -> dict[str, Any]:
    del blob["latency_s"]["tpot"]["p90"]
    return blob


def csv_edit(change: Callable[[list[str]], list[str]]) -> Callable[[Path], None]:
    """Damage: rewrite sweep.csv's lines through ``change``."""
    def damage(folder: Path) -> None:
        path = folder / "sweep.csv"
        path.write_text("\n".join(change(path.read_text().splitlines())) + "\n")
    return damage


def set_cell(line: int, column: str, value: str) -> Callable[[list[str]], list[str]]:
    """A sweep.csv change: the cell of header ``column`` on 1-based ``line`` becomes ``value``."""
    def change(lines: list[str]) -> list[str]:
        i = lines[0].split(",").index(column)
        cells = lines[line - 1].split(",")
        cells[i] = value
        lines[line - 1] = ",".join(cells)
        return lines
    return change


def drop_column(column: str) -> Callable[[list[str]], list[str]]:
    """A sweep.csv change without ``column`` (its header name)."""
    def change(lines: list[str]) -> list[str]:
        i = lines[0].split(",").index(column)
        return [",".join(c for j, c in enumerate(line.split(",")) if j != i) for line in lines]
    return change


CASES = [
    # (kind, damage, pattern the one error line must match)
    ("simulate", write("summary.json", "[]"),
     r"summary\.json: not a servesim simulate summary: is \[\], expected a mapping with "
     r"latency_s, requests, .*; rerun `servesim simulate`$"),
    ("simulate", write("summary.json", '{"requests": {"total": 3}}'),
     r"summary\.json: not a servesim simulate summary: missing keys latency_s, throughput, "
     r"batch, kv, preemptions, span_s, policy, saturation; rerun `servesim simulate`$"),
    ("simulate", edit_json("summary.json", set_key("latency_s.ttft.p99", "fast")),
     r'summary\.json: latency_s\.ttft\.p99: not a servesim simulate summary: is "fast", '
     r"expected a number or null"),
    ("simulate", edit_json("summary.json", set_key("latency_s", [1, 2])),
     r"summary\.json: latency_s: .*is \[1, 2\], expected a mapping of metric names"),
    ("simulate", edit_json("summary.json", set_key("simulated.pools", {})),
     r"summary\.json: simulated\.pools: .*is \{\}, expected a non-empty mapping of pool roles"),
    ("simulate", edit_json("summary.json", set_key("kv.blocks_per_replica", [])),
     r"summary\.json: kv\.blocks_per_replica: .*is \[\], expected a non-empty list"),
    ("simulate", edit_json("summary.json", set_key("classes", None)),
     r"summary\.json: classes: .*is null, expected a mapping of class names"),
    # A count below 0, or not whole, had been printed ("-3 sent").
    ("simulate", edit_json("summary.json", set_key("requests.total", -3)),
     r"summary\.json: requests\.total: .*is -3, expected a whole number of 0 or more, or null"),
    ("simulate", edit_json("summary.json", set_key("requests.finished", 2.5)),
     r"summary\.json: requests\.finished: .*is 2\.5, expected a whole number"),
    # What the shape check cannot say still ends as one line naming the file.
    ("simulate", edit_json("summary.json", drop_stat),
     r"summary\.json: not a servesim simulate summary: unexpected content "
     r"\(missing key 'p90'\); rerun `servesim simulate`$"),
    ("compare", write("compare.json", '{"runs": 5}'),
     r"compare\.json: runs: not a servesim compare result: is 5, expected a mapping with "
     r"latency_s, .*; rerun `servesim compare`$"),
    ("compare", write("compare.json", "{}"),
     r"compare\.json: .*is \{\}, expected a non-empty mapping of policy names"),
    ("compare", edit_json("compare.json", set_key("chunked.saturation", True)),
     r"compare\.json: chunked\.saturation: .*is true, expected a mapping with saturated"),
    ("capacity", write("capacity.json", '{"best": 3}'),
     r"capacity\.json: not a servesim capacity result: missing keys seeds, tol, "
     r"max_rate_per_replica, checked; rerun `servesim capacity`$"),
    ("capacity", edit_json("capacity.json", set_key("best", 3)),
     r"capacity\.json: best: .*is 3, expected a mapping with policy, tp, replicas, gpus"),
    ("capacity", edit_json("capacity.json", set_key("max_rate_per_replica.0.ci_low", "x")),
     r'capacity\.json: max_rate_per_replica\[0\]\.ci_low: .*is "x", expected a number or null'),
    ("capacity", edit_json("capacity.json", set_key("tol", "10%")),
     r'capacity\.json: tol: .*is "10%", expected a number'),
    ("sweep", edit_json("sweep.json", set_key("rates", [])),
     r"sweep\.json: rates: not a servesim sweep manifest: is \[\], expected a non-empty list "
     r"of rates"),
    ("sweep", edit_json("sweep.json", set_key("slo_targets.0.limit_s", None)),
     r"sweep\.json: slo_targets\[0\]\.limit_s: .*is null, expected a number"),
    ("sweep", lambda folder: (folder / "sweep.csv").unlink(),
     r"sweep\.csv: missing: a sweep folder holds sweep\.csv beside sweep\.json; "
     r"rerun `servesim sweep`$"),
    ("sweep", write("sweep.csv", ""),
     r"sweep\.csv: not a servesim sweep table: empty, expected a header and one line per "
     r"grid point"),
    ("sweep", write("sweep.csv", "x,y\n"),
     r"sweep\.csv: line 1: not a servesim sweep table: missing columns policy, replicas, tp, "
     r"rate_rps, seeds, .*saturated, ttft_p99_s, e2e_p90_s; rerun `servesim sweep`$"),
    ("sweep", csv_edit(drop_column("e2e_p90_s")),
     r"sweep\.csv: line 1: .*missing column e2e_p90_s;"),
    ("sweep", csv_edit(lambda lines: lines[:1]),
     r"sweep\.csv: not a servesim sweep table: no grid point below the header"),
    ("sweep", csv_edit(lambda lines: [*lines[:2], "chunked,1,1"]),
     r"sweep\.csv: line 3: .*3 cells, expected \d+ \(one per header column\)"),
    ("sweep", csv_edit(set_cell(2, "rate_rps", "fast")),
     r"sweep\.csv: line 2: .*column rate_rps is 'fast', expected a finite number;"),
    ("sweep", csv_edit(set_cell(3, "seeds", "")),
     r"sweep\.csv: line 3: .*column seeds is '', expected a finite number;"),
    ("sweep", csv_edit(set_cell(2, "ttft_p99_s", "n/a")),
     r"sweep\.csv: line 2: .*column ttft_p99_s is 'n/a', expected a finite number or empty;"),
    # NaN and infinities: servesim writes null (JSON) or an empty cell (CSV) for a
    # missing value, so one of them was written elsewhere; printed it would read "nan ms".
    ("simulate", edit_json("summary.json", set_key("latency_s.ttft.p50", float("nan"))),
     r"summary\.json: cannot read it: NaN is not a value servesim writes \(a "
     r"missing value is null\)$"),
    ("compare", edit_json("compare.json", set_key("chunked.latency_s.ttft.p99", float("inf"))),
     r"compare\.json: cannot read it: Infinity is not a value servesim writes"),
    ("sweep", csv_edit(set_cell(2, "ttft_p50_s", "nan")),
     r"sweep\.csv: line 2: .*column ttft_p50_s is 'nan', expected a finite number or empty;"),
    ("sweep", csv_edit(set_cell(2, "rate_rps", "inf")),
     r"sweep\.csv: line 2: .*column rate_rps is 'inf', expected a finite number;"),
    # Half a UTF-16 surrogate pair: servesim writes none; reported, it had stopped the
    # report's writing with a UnicodeEncodeError.
    ("simulate", edit_json("summary.json", set_key("scenario", "a\ud800")),
     r"summary\.json: cannot read it: scenario: a \\uD800-\\uDFFF escape is half of a "
     r"UTF-16 surrogate pair, not a character servesim writes$"),
    # A damaged plot would be embedded as a broken image without a word.
    ("simulate", write("ttft_tpot_cdf.png", "x"),
     r"ttft_tpot_cdf\.png: not a PNG image \(it starts b'x'\); run the command again"),
]


@pytest.mark.parametrize("kind,damage,pattern", CASES,
                         ids=[f"{kind}-{i}" for i, (kind, _, _) in enumerate(CASES)])
def test_damaged_folder_is_one_error_line(folders: dict[str, Path], tmp_path: Path,
                                          capsys: Any, kind: str,
                                          damage: Callable[[Path], None],
                                          pattern: str) -> None:
    folder = broken(folders, tmp_path, kind, damage)
    assert cli_main(["report", str(folder)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith(f"servesim: error: {folder}/"), err
    assert re.search(pattern, err.rstrip("\n")), err
    assert not (folder / "report.html").exists()


def test_collect_raises_servesim_error(folders: dict[str, Path], tmp_path: Path) -> None:
    folder = broken(folders, tmp_path, "simulate", write("summary.json", "[]"))
    with pytest.raises(ServesimError, match="expected a mapping with latency_s") as info:
        collect(folder)
    assert info.value.source == str(folder / "summary.json") and info.value.where is None
    folder = broken(folders, tmp_path, "sweep", write("sweep.csv", "x,y\n"))
    with pytest.raises(ServesimError, match="missing columns policy, replicas") as info:
        collect(folder)
    assert info.value.source == str(folder / "sweep.csv") and info.value.where == "line 1"


@pytest.mark.parametrize("kind", KINDS)
def test_valid_folders_still_report(folders: dict[str, Path], tmp_path: Path,
                                    kind: str) -> None:
    folder = broken(folders, tmp_path, kind, lambda folder: None)
    assert cli_main(["report", str(folder)]) == 0
    assert (folder / "report.html").read_text().startswith("<!doctype html>")


@pytest.mark.parametrize("name", ["summary.json", "requests.csv"])
def test_report_out_onto_a_file_of_the_run_is_refused(folders: dict[str, Path],
                                                      tmp_path: Path, capsys: Any,
                                                      name: str) -> None:
    """``--out DIR/summary.json`` had replaced the summary with the report's HTML; a new
    name in the folder, or a report written before, is still fine."""
    folder = broken(folders, tmp_path, "simulate", lambda folder: None)
    before = (folder / name).read_bytes()
    assert cli_main(["report", str(folder), "--out", str(folder / name)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and f"--out: got {folder / name}, one of the run's own " \
        "files" in err, err
    assert (folder / name).read_bytes() == before
    assert cli_main(["report", str(folder), "--out", str(folder / "mine.html")]) == 0
    assert cli_main(["report", str(folder), "--out", str(folder / "mine.html")]) == 0
    assert cli_main(["report", str(folder), "--out", str(folder)]) == 2
    assert "a folder; expected a report file" in capsys.readouterr().err
    # Outside the folder too: a name that is no report's (a scenario's, say) is refused.
    scenario = tmp_path / "base.yaml"
    scenario.write_text("name: x\n")
    assert cli_main(["report", str(folder), "--out", str(scenario)]) == 2
    assert "expected a report file name ending .html or .md" in capsys.readouterr().err
    assert scenario.read_text() == "name: x\n"


def test_a_sweep_table_saved_with_a_byte_order_mark_reports_as_without(
        folders: dict[str, Path], tmp_path: Path) -> None:
    # A spreadsheet's "save as UTF-8 CSV" adds the mark; the report reads the text it
    # checked, so the first column is still ``policy`` rather than a lost key.
    plain = broken(folders, tmp_path / "plain", "sweep", lambda folder: None)
    marked = broken(folders, tmp_path / "marked", "sweep", lambda folder: (
        folder / "sweep.csv").write_bytes(b"\xef\xbb\xbf" + (folder / "sweep.csv").read_bytes()))
    assert cli_main(["report", str(plain)]) == 0 and cli_main(["report", str(marked)]) == 0
    assert (marked / "report.html").read_text() == (plain / "report.html").read_text(
        ).replace(str(plain), str(marked))


# ---------------------------------------------------------------- trace plot --out
def plot(out: str | Path) -> int:
    return trace_cli.main(["plot", str(TRACE), "--spread", "--out", str(out)])


def one_error(capsys: Any) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("servesim: error: "), err
    return err.rstrip("\n")


@pytest.mark.parametrize("name,pattern", [
    ("t.txt", r"t\.txt: --out has extension \.txt; allowed: \.png, \.pdf, \.svg$"),
    ("t.jpeg", r"--out has extension \.jpeg; allowed: \.png, \.pdf, \.svg$"),
])
def test_plot_out_with_an_unsupported_extension(tmp_path: Path, capsys: Any, name: str,
                                                pattern: str) -> None:
    assert plot(tmp_path / name) == 2
    assert re.search(pattern, one_error(capsys))
    assert list(tmp_path.iterdir()) == []


def test_plot_out_that_is_a_folder(tmp_path: Path, capsys: Any) -> None:
    assert plot(tmp_path) == 2
    err = one_error(capsys)
    assert f"{tmp_path}: --out is a folder; give a file in it, e.g. {tmp_path}/trace.png" in err
    assert not tmp_path.with_suffix(".png").exists()


def test_plot_out_in_a_missing_folder_or_under_a_file(tmp_path: Path, capsys: Any) -> None:
    assert plot(tmp_path / "no" / "t.png") == 2
    assert f"the folder for --out, {tmp_path / 'no'}, does not exist" in one_error(capsys)
    (tmp_path / "f").write_text("")
    assert plot(tmp_path / "f" / "t.png") == 2
    assert f"the folder for --out, {tmp_path / 'f'}, is not a folder" in one_error(capsys)


@pytest.mark.skipif(not Path("/proc/self").is_dir(), reason="needs Linux's /proc")
def test_plot_out_in_a_folder_that_takes_no_files(capsys: Any) -> None:
    assert plot("/proc/servesim-test.png") == 2
    assert re.search(r"/proc/servesim-test\.png: cannot write --out into the folder /proc: ",
                     one_error(capsys))


def test_a_failed_write_leaves_no_file(tmp_path: Path, capsys: Any,
                                       monkeypatch: pytest.MonkeyPatch) -> None:
    def full_disk(trace: Any, out: Path) -> Path:
        Path(out).write_bytes(b"\x89PNG half")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr("sim.workload.tracestats.plot_trace", full_disk)
    assert plot(tmp_path / "t.png") == 2
    assert "cannot write --out into the folder" in one_error(capsys)
    assert list(tmp_path.iterdir()) == []


def test_plot_prints_the_file_it_wrote(tmp_path: Path, capsys: Any) -> None:
    assert plot(tmp_path / "t") == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 't.png'}\n"
    assert (tmp_path / "t.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot(tmp_path / "t.svg") == 0
    assert capsys.readouterr().out == f"wrote {tmp_path / 't.svg'}\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.png", "t.svg"]


def test_a_missing_folder_is_said_to_be_missing(tmp_path: Path, capsys: Any) -> None:
    """A folder that does not exist had been called "not a folder"."""
    assert cli_main(["report", str(tmp_path / "gone")]) == 2
    assert one_error(capsys) == f"servesim: error: {tmp_path / 'gone'}: no such folder"
    (tmp_path / "file").write_text("x")
    assert cli_main(["report", str(tmp_path / "file")]) == 2
    assert one_error(capsys) == f"servesim: error: {tmp_path / 'file'}: not a folder"
