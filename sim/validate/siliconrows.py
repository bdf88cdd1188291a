"""Reading a silicon CSV (AIConfigurator's ``silicon_sample.csv`` or a file with its
columns): one :class:`Row` per measured run, a malformed cell an error naming file,
line and column."""

from __future__ import annotations

import csv
import hashlib
import io
import math
import re
from dataclasses import dataclass
from pathlib import Path

from sim.errors import ServesimError
from sim.files import read_text
from sim.workload.traceio import plain_digits

# The GPU of each of the sample's systems.
SYSTEM_GPUS = {"a100_sxm": "a100-80gb", "h100_sxm": "h100-sxm", "h200_sxm": "h200",
               "b200_sxm": "b200", "b300_sxm": "b300", "l40s": "l40s"}
# The GEMM quantisation mode of FP4 rows (W4A4 on FP4 tensor cores), simulated for dense
# models, whose FP4 releases (NVIDIA's Llama-3.1-70B-Instruct-FP4, Qwen3-32B-NVFP4) quantise
# every projection. A mixture of experts' FP4 row does not say which of its projections
# the checkpoint it ran keeps at 4 bits (the experts alone, or attention too): that comes
# from the checkpoint its recipe serves
# (:data:`sim.validate.siliconcheckpoints.NVFP4_MOE_CHECKPOINTS`).
FP4_MODES = {"nvfp4": "nvfp4"}
# AIConfigurator's files whose rows are InferenceX's runs: of the 76 rows of its Qwen3.5
# gap analysis, 68 have the measured TTFT and TPOT of an InferenceX row of the same setup
# rounded to hundredths of a millisecond, 7 are setups of the same sweep InferenceX's
# exports lack (expert parallelism 4 at 4 to 16 clients), and one differs from its twin
# by 4% in TTFT (checked 2026-12-03).
INFERENCEX_COPIES = frozenset({"source_file=qwen3.5-397b-gap-analysis.csv"})
# InferenceX's TensorRT-LLM DeepSeek-R1 runs that drafted with multi-token prediction (its
# ``dsr1_*_trt_mtp.sh`` recipes: three draft tokens without data-parallel attention, one
# with it), which its exports do not label: (release, day measured; "" any day). Its
# configuration of late January 2026 had an MTP and a plain entry for each of FP8 on H200,
# FP8 on B200 and FP4 on B200, all on release 1.1.0rc2.post2; the runs measured on
# 2026-01-14 hold exactly the setups of the MTP entries (for H200 FP8 all 21, which include
# 128 and 256 clients, which the plain entry never ran; for B200 setups only the MTP entries
# list), the runs of 2025-12-15 those of the plain ones, and at 4 clients the former's time
# per output token is about half the latter's (7.1 against 13.7 ms on H200, 1,024/8,192).
# Only the B200 MTP entries moved to release 1.2.0rc6.post3 (its change log: PRs #632 and
# #642; the plain ones went to 1.2.0rc6.post2, #594 and #620).
MTP_RUNS = frozenset({("1.1.0rc2.post2", "2026-01-14"), ("1.2.0rc6.post3", "")})
# DeepSeek-V3 and R1, one architecture (InferenceX's DeepSeek-R1 runs, some exports name V3).
DEEPSEEK_PATHS = ("deepseek-ai/DeepSeek-V3", "deepseek-ai/DeepSeek-R1")


@dataclass(frozen=True)
class Row:
    """One measured run: ``concurrency`` clients, lengths ``isl``/``osl`` (tokens),
    measured mean TTFT and TPOT (milliseconds); ``line`` its line in the file."""

    id: str
    line: int
    backend: str
    version: str
    model_path: str
    system: str
    precision: str
    mode: str
    isl: int
    osl: int
    concurrency: int
    tp: int
    pp: int
    attention_dp: int
    ttft_ms: float
    tpot_ms: float
    source: str = ""
    gemm_quant_mode: str = ""
    moe_tp: int = 0  # 0: not given
    moe_ep: int = 0
    file: str = ""  # the CSV it was read from

    @property
    def collection(self) -> str:
        """Who measured the row: ``inferencex`` (SemiAnalysis InferenceX: its ``db-dump``
        rows and its dated exports, ``source_file=YYYY-MM-DD.csv``; the engine's own
        server and vLLM's benchmark client, which draws lengths from [0.8 L, L]) or
        ``aic`` (AIConfigurator's own gap-analysis collection, some of it served behind
        NVIDIA Dynamo's frontend, whose client settings are not published). Files of
        that collection which copy InferenceX's runs (:data:`INFERENCEX_COPIES`) count as
        InferenceX's."""
        inferencex = self.source.startswith("db-dump") or re.match(
            r"source_file=\d{4}-\d{2}-\d{2}\.csv", self.source) is not None
        copied = self.source.partition(";")[0] in INFERENCEX_COPIES
        return "inferencex" if inferencex or copied else "aic"

    @property
    def measured(self) -> str:
        """The day the run was measured (``YYYY-MM-DD``) as its source field records it
        (``measured=...``), or "" where it does not."""
        found = re.search(r"measured=(\d{4}-\d{2}-\d{2})", self.source)
        return found.group(1) if found else ""

    @property
    def unlabelled_mtp(self) -> bool:
        """Whether the row is one of InferenceX's TensorRT-LLM DeepSeek runs that drafted
        with multi-token prediction, which the export does not say (:data:`MTP_RUNS`)."""
        if self.backend != "trtllm" or self.model_path not in DEEPSEEK_PATHS or \
                self.collection != "inferencex":
            return False
        return (self.version, self.measured) in MTP_RUNS or (self.version, "") in MTP_RUNS

    @property
    def held_out(self) -> bool:
        """Whether the row is kept out of fitting the priors: half the rows, chosen by a
        hash of the row's id (reproducible, independent of file order)."""
        return hashlib.sha256(self.id.encode()).digest()[0] % 2 == 1


def default_path() -> Path:
    """``silicon_sample.csv`` of the installed ``aiconfigurator-core``."""
    from sim.cost.tables.kerneltables import systems_dir

    return systems_dir() / "silicon_sample.csv"


# What a row's counts may be: far above any public run (the sample's largest: prompts
# of 15,000 tokens, 8,192 clients, 72 GPUs), so that a mistyped cell is refused rather
# than simulated as 10^8-token prompts, or 10^9 requests that never end. Prompt and
# output lengths: four times the longest context of any preset (262,144 tokens); a row
# longer than its model's own context is skipped (:func:`fits_context`). Clients: the
# row's batch_size times its attention_dp_size. 0, an empty cell or nan (any letter case,
# as a data frame may write a missing count): not given.
MAX_TOKENS = 1 << 20
MAX_CLIENTS = 1 << 16
MAX_GPUS = 1024
# Each count column: (its value when not given, its bound).
COUNTS = {"isl": (0, MAX_TOKENS), "osl": (0, MAX_TOKENS), "batch_size": (0, MAX_CLIENTS),
          "tp_size": (0, MAX_GPUS), "pp_size": (1, MAX_GPUS),
          "attention_dp_size": (1, MAX_GPUS), "moe_tp_size": (0, MAX_GPUS),
          "moe_ep_size": (0, MAX_GPUS)}
COLUMNS = ("id", "backend", "backend_version", "model_path", "system", "precision", "mode",
           "isl", "osl", "batch_size", "tp_size", "pp_size", "silicon_ttft_ms",
           "silicon_tpot_ms")


def _int(value: str | None, default: int, top: int) -> int:
    """A whole number in [0, ``top``] from a CSV cell ("" or nan in any letter case:
    ``default``); ValueError otherwise."""
    if value is None or value.strip().lower() in ("", "nan"):
        return default
    x = _number(value)
    if not math.isfinite(x) or x != int(x) or not 0 <= x <= top:  # int(inf) would overflow
        raise ValueError(value)
    return int(x)


def _number(value: str) -> float:
    """``value`` as a float; ValueError for text that is not
    :func:`~sim.workload.traceio.plain_digits` (1_024, another script's digits), which
    ``float`` takes but a CSV writer never writes."""
    if not plain_digits(value):
        raise ValueError(value)
    return float(value)


def _records(path: Path) -> list[tuple[int, dict[str, str]]]:
    """Each record of a silicon CSV, with the line it starts on and its cells by column.
    A header that lacks a column or names one twice, a quote left open, a cell that runs
    over lines, or a row with more cells than the header: an error naming the line."""
    reader = csv.reader(io.StringIO(read_text(path, "silicon CSV"), newline=""), strict=True)
    header: list[str] = []
    out: list[tuple[int, dict[str, str]]] = []
    start = 1
    try:
        for cells in reader:
            if reader.line_num > start:
                # No field of the format holds a line break: a quote opened here was
                # closed lines later, and the lines between were read as one cell.
                raise ServesimError(
                    f"malformed CSV line: a quoted cell runs on to line {reader.line_num} "
                    "(a quote left open?); no cell of a silicon CSV spans lines",
                    source=str(path), where=f"line {start}")
            if cells and not header:
                header = _header(cells, path, start)
            elif len(cells) > len(header) and any(c.strip() for c in cells[len(header):]):
                raise ServesimError(
                    f"malformed CSV line: {len(cells)} cells where the header names "
                    f"{len(header)} columns (a comma in a cell not quoted?)",
                    source=str(path), where=f"line {start}")
            elif cells:  # a blank line is no row
                out.append((start, dict(zip(header, cells, strict=False))))
            start = reader.line_num + 1
    except csv.Error as exc:
        why = ("a quote opened here is never closed" if "end of data" in str(exc)
               else str(exc))
        raise ServesimError(f"malformed CSV line: {why}", source=str(path),
                            where=f"line {start}") from None
    if not header:
        _header([], path, 1)  # an empty file: no column at all
    return out


def _header(cells: list[str], path: Path, line: int) -> list[str]:
    """``cells`` (on ``line``) as the header: every column of :data:`COLUMNS`, none named
    twice."""
    seen: dict[str, int] = {}
    for i, name in enumerate(cells, start=1):
        if name and name in seen:
            raise ServesimError(f"column {name!r} is named twice (columns {seen[name]} and "
                                f"{i}); which one holds the data is not clear",
                                source=str(path), where=f"line {line}")
        seen[name] = i
    missing = [c for c in COLUMNS if c not in seen]
    if missing:
        raise ServesimError(f"missing column {missing[0]!r}", source=str(path))
    return cells


def read_rows(path: Path) -> list[Row]:
    """Every row of a silicon CSV; a malformed one is an error naming file, line and column."""
    return [_row(r, line, path) for line, r in _records(path)]


def _row(r: dict[str, str], line: int, path: Path) -> Row:
    """The :class:`Row` of the cells ``r`` on ``line`` (a cell the row lacks: empty)."""
    col = ""
    try:
        n = {}
        for col, (default, top) in COUNTS.items():
            n[col] = _int(r.get(col), default, top)
        col = "silicon_ttft_ms"
        ttft = _number(r.get(col) or "nan")
        col = "silicon_tpot_ms"
        tpot = _number(r.get(col) or "nan")
    except (TypeError, ValueError):
        what = "a number" if col.startswith("silicon_") else \
            f"a whole number from 0 to {COUNTS[col][1]:,}"
        if not plain_digits(str(r.get(col))):
            what += " written in ASCII digits alone (0-9, no _ between them)"
        raise ServesimError(f"got {r.get(col)!r}, expected {what}",
                            source=str(path), where=f"line {line}, {col}") from None
    clients = n["batch_size"] * max(n["attention_dp_size"], 1)
    if clients > MAX_CLIENTS:
        raise ServesimError(
            f"got {r.get('batch_size')!r} clients per attention-data-parallel rank, times "
            f"{n['attention_dp_size']} ranks: {clients:,} clients, expected at most "
            f"{MAX_CLIENTS:,}", source=str(path), where=f"line {line}, batch_size")
    for col, ms in (("silicon_ttft_ms", ttft), ("silicon_tpot_ms", tpot)):
        # An empty cell is a latency not measured (an incomplete row); 'nan' or 'inf'
        # written in one is not a time.
        if (r.get(col) or "").strip() and not 0 < ms < math.inf:
            raise ServesimError(f"got {r.get(col)!r}, expected a positive time (ms); leave "
                                "the cell empty for one not measured",
                                source=str(path), where=f"line {line}, {col}")
    # Missing cells: empty. Spaces around a cell are stripped, as the number cells'
    # are: ' vllm ' is the backend vllm, and a model name is matched without them.
    text = {k: str(r.get(k) or "").strip() for k in (
        "id", "backend", "backend_version", "model_path", "system", "precision",
        "mode", "silicon_data_source", "gemm_quant_mode")}
    return Row(text["id"], line, text["backend"], text["backend_version"],
               text["model_path"], text["system"], text["precision"], text["mode"],
               n["isl"], n["osl"], n["batch_size"], n["tp_size"], n["pp_size"],
               max(n["attention_dp_size"], 1), ttft, tpot, text["silicon_data_source"],
               text["gemm_quant_mode"], n["moe_tp_size"], n["moe_ep_size"], str(path))
