"""Run outputs: requests.csv, summary.json and TTFT/TPOT CDF plots (the table a run
prints is :mod:`sim.report.printed`'s).

requests.csv's last column names each request's class (empty without classes).

A run's files are written into a temporary folder that then replaces the output folder
whole (:mod:`sim.report.folder`), so an interrupted run leaves the previous outputs as
they were, never a mix of old and new files.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import numpy as np

from sim.config.scenario import input_files
from sim.core.engine import RunResult
from sim.core.request import STATUS_NAMES
from sim.errors import ServesimError
from sim.report.cdfplot import plot_cdfs
from sim.report.csvmeta import meta_json, meta_path
from sim.report.folder import replaced_folder
from sim.report.human import cost_phrase, setup_phrase
from sim.report.metrics import clean, per_request
from sim.report.stagereport import plot_over_time

__all__ = ["plot_cdfs"]  # compare and validate draw their CDFs through this module

CSV_COLUMNS = ("id", "arrival_s", "prompt_tokens", "output_tokens", "first_scheduled_s",
               "first_token_s", "finish_s", "ttft_s", "tpot_s", "e2e_s", "preemptions",
               "replica", "status", "reason", "class")


# The longest folder name (bytes) out/ takes: file systems' 255 (NAME_MAX), less the
# ".tmp-<pid>" a run writes beside it (sim.report.folder) with room for a 10-digit pid.
MAX_FOLDER_BYTES = 255 - 15


def shorten(text: str, most: int = 40) -> str:
    """``text``, or its first ``most`` characters and an ellipsis: a long name quoted in an
    error stays readable."""
    return text if len(text) <= most else text[:most] + "\u2026"


def default_out(name: str, suffix: str = "", source: str | None = None) -> Path:
    """``out/NAME[SUFFIX]``, the folder a command writes to when not given ``--out``; an
    error when the scenario's name is not one plain folder name (a ``/``, ``..``), which
    would put the outputs somewhere else, or is longer than a folder name may be."""
    folder = f"{name}{suffix}"
    # Blank or space-edged names make folders a shell listing hides ("out/ ").
    if (not name.strip() or name != name.strip() or folder in (".", "..") or "/" in folder
            or "\\" in folder or not folder.isprintable()):
        # isprintable: no control (\x7f, \x85), line-separator or format (U+202E, which
        # reverses how a listing reads) characters, only those of a plain name.
        raise ServesimError(f"scenario name {name!r} cannot name a folder under out/ (no '/', "
                            "'\\', '..', control or format characters, or spaces at either "
                            "end); "
                            "rename the scenario or give --out DIR", source, "name")
    if len(folder.encode("utf-8", "surrogateescape")) > MAX_FOLDER_BYTES:
        raise ServesimError(f"scenario name {shorten(name)!r} ({len(name):,} characters) is "
                            f"too long to name a folder under out/: at most "
                            f"{MAX_FOLDER_BYTES} bytes{' with ' + repr(suffix) if suffix else ''}"
                            ", as file systems take 255 and the run's .tmp-<pid> folder "
                            "beside it adds 15; rename the scenario or give --out DIR",
                            source, "name")
    return Path("out") / folder


def write_atomic(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` via a temporary file and a rename.

    The data is flushed to disk before the rename, so after a crash ``path`` is either
    absent, its previous version, or complete; an interrupted write removes the
    temporary file instead of leaving it behind."""
    tmp = path.with_name(f".{path.name}.tmp")
    try:
        with open(tmp, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_meta(csv_path: Path, rows: str, columns: list[str], simulated: dict[str, Any],
               varied: dict[str, Any] | None = None) -> Path:
    """Write the description of the CSV at ``csv_path`` (:func:`sim.report.csvmeta.meta_json`:
    what one row is, ``columns`` with their units, the resolved scenario ``simulated``
    and what a study ``varied``) beside it, atomically; its path."""
    path = meta_path(csv_path)
    write_atomic(path, meta_json(csv_path, rows, columns, simulated, varied))
    return path


def _fmt(values: np.ndarray) -> list[str]:
    # Nanosecond resolution; an event that did not happen is an empty cell.
    return ["" if v != v else f"{v:.9f}" for v in values.tolist()]


def _csv_cell(text: str) -> str:
    # RFC 4180 quoting, needed only for trace class labels (scenario names are plain).
    if any(c in text for c in ',"\r\n'):
        return '"' + text.replace('"', '""') + '"'
    return text


def _class_cells(klass: np.ndarray | None, names: tuple[str, ...], n: int) -> list[str]:
    """Each request's class name (empty cells for a workload without classes)."""
    if klass is None:
        return [""] * n
    cells = [_csv_cell(x) for x in names]
    return [cells[k] for k in klass.tolist()]


CSV_CHUNK = 32768  # rows formatted at a time: peak memory stays near the output's size


def requests_csv(res: RunResult) -> bytes:
    """One row per request, in id order (times in seconds)."""
    lat = per_request(res)
    rq = res.requests
    parts = [(",".join(CSV_COLUMNS) + "\n").encode()]
    for a in range(0, len(rq), CSV_CHUNK):
        b = min(a + CSV_CHUNK, len(rq))
        s = slice(a, b)
        cols = [
            [str(i) for i in range(a, b)],
            _fmt(rq.arrival_s[s]),
            [str(v) for v in rq.prompt_tokens[s].tolist()],
            [str(v) for v in rq.output_tokens[s].tolist()],
            _fmt(res.first_sched[s]), _fmt(res.first_token[s]), _fmt(res.finish[s]),
            _fmt(lat["ttft"][s]), _fmt(lat["tpot"][s]), _fmt(lat["e2e"][s]),
            [str(v) for v in res.preemptions[s].tolist()],
            [str(v) if v >= 0 else "" for v in res.replica[s].tolist()],
            [STATUS_NAMES[v] for v in res.status[s].tolist()],
            [str(v) for v in res.reason[s].tolist()],
            _class_cells(None if rq.klass is None else rq.klass[s], rq.class_names, b - a),
        ]
        parts.append(("\n".join(",".join(row) for row in zip(*cols, strict=True))
                      + "\n").encode())
    return b"".join(parts)


def summary_json(summary: dict[str, Any]) -> bytes:
    """The summary as strict, stable JSON."""
    return (json.dumps(clean(summary), indent=2, allow_nan=False) + "\n").encode()


RUN_FILES = ("summary.json", "requests.csv")  # what marks a folder as a run's outputs
REQUESTS_ROWS = "one row per request, in id order"


def run_title(summary: dict[str, Any]) -> str:
    """``quickstart: Llama-3-8B on 1× H100-SXM (tp 1), chunked; cost: ...``: what a
    run simulated, for its plots' and report's titles."""
    sim = summary["simulated"]
    return (f"{summary['scenario']}: {setup_phrase(sim)}, {summary['policy']}; "
            f"cost: {cost_phrase(sim)}")


def write_run(res: RunResult, summary: dict[str, Any], out_dir: Path,
              plots: bool = True) -> list[Path]:
    """Write requests.csv, summary.json and (optionally) the CDF plot into a temporary
    folder that then replaces ``out_dir`` whole (:mod:`sim.report.folder`; the scenario
    file, if it lies in ``out_dir``, is kept); return the final paths."""
    names = ["requests.csv", "summary.json"]
    with replaced_folder(out_dir, RUN_FILES, inputs=input_files(res.scenario)) as stage:
        write_atomic(stage / names[0], requests_csv(res))
        names.append(write_meta(stage / names[0], REQUESTS_ROWS, list(CSV_COLUMNS),
                                summary["simulated"]).name)
        write_atomic(stage / names[1], summary_json(summary))
        if plots:
            names.append("ttft_tpot_cdf.png")
            plot_cdfs({res.scenario.name: res}, stage / names[-1], run_title(summary))
            if res.requests.stage_windows is not None:
                names.append("latency_over_time.png")
                plot_over_time(res, stage / names[-1])
    return [out_dir / n for n in names]


def write_compared(out_dir: Path, label: str, runs: dict[str, RunResult],
                   plot: dict[str, RunResult] | None) -> list[Path]:
    """Two or more runs of the same requests side by side: ``NAME-LABEL.csv`` per run
    of ``runs`` (name -> run) and, given ``plot`` (legend -> run), ``cdf-LABEL.png``
    with their CDFs overlaid; the paths written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, res in runs.items():
        paths.append(out_dir / f"{name}-{label}.csv")
        write_atomic(paths[-1], requests_csv(res))
    if plot:
        paths.append(out_dir / f"cdf-{label}.png")
        plot_cdfs(plot, paths[-1])
    return paths
