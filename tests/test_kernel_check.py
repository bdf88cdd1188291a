"""The kernel cross-check: scripts/kernel_check.py (torch, run on a GPU by
scripts/gpu_check.sh) and docs/scripts/kernel_compare.py (its rows against the public
kernel tables)."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import gpu_report, load_script, needs_tables

ROOT = Path(__file__).resolve().parents[1]
CHECK = ROOT / "scripts" / "kernel_check.py"
COMPARE = ROOT / "docs" / "scripts" / "kernel_compare.py"
FIELDS = ["device", "torch", "cuda", "memory_bytes", "op", "dtype", "m", "n", "k", "ms", "how",
          "error"]


def test_kernel_check_cpu_rows(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    out = tmp_path / "k.csv"
    proc = subprocess.run([sys.executable, str(CHECK), str(out), "--device", "cpu", "--quick"],
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr
    rows = list(csv.DictReader(out.open()))
    assert list(rows[0]) == FIELDS
    ops = [(r["op"], r["dtype"], r["m"]) for r in rows]
    # Every shape is written, the refused ones with their reason: none is dropped.
    assert ops == [("small", "bf16", "1"), ("small", "bf16", "16"), ("small", "fp8", "1"),
                   ("small", "fp8", "16"), ("prefill_attention", "fp32", "64"),
                   ("decode_attention", "fp32", "2")]
    assert (rows[-1]["n"], rows[-1]["k"]) == ("64", "8")  # KV tokens, KV heads
    assert {r["memory_bytes"] for r in rows} == {"0"}  # no device memory on the CPU
    for r in rows:
        if r["dtype"] == "fp8":
            assert r["ms"] == "" and "CUDA only" in r["error"]
        else:
            assert float(r["ms"]) > 0 and r["how"] == "eager" and r["error"] == ""


def _row(**kw: object) -> dict[str, object]:
    base: dict[str, object] = {"device": "NVIDIA H200", "torch": "2.11.0", "cuda": "13.0",
                               "memory_bytes": 150_106_652_672, "op": "grid", "dtype": "bf16",
                               "m": 1024, "n": 4096, "k": 4096, "ms": "", "how": "graph",
                               "error": ""}
    return {**base, **kw}


@needs_tables
def test_kernel_compare_against_the_tables(tmp_path: Path,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    from sim.cost.tables.gemmtable import gemm_table
    from sim.cost.tables.kerneltables import load_table
    bf16 = gemm_table("h200", "vllm", "0.24.0", "bf16").table.at(1024, 4096, 4096) * 1e3
    fp8 = gemm_table("h200", "vllm", "0.24.0", "fp8").table.at(1024, 4096, 4096) * 1e3
    # The generation row of 32 sequences at step 2047: 2,048 KV tokens each.
    gen = load_table("h200", "attention", "vllm", "0.24.0", "generation_attention_perf").where(
        batch_size=32, step=2047, num_heads=32, num_key_value_heads=8, head_dim=128,
        kv_cache_dtype="bfloat16", window_size=0)
    decode = float(gen.columns["latency"][0])
    # 10% over the table in bf16, and an fp8 row twice as fast as the bf16 one.
    rows = [_row(ms=f"{bf16 * 1.1:.6f}"),
            _row(dtype="fp8", ms=f"{bf16 * 1.1 / 2:.6f}"),
            _row(dtype="fp8", m=16, error="RuntimeError: refused"),
            _row(op="prefill_attention", m=4096, n=32, k=8, ms="0.5"),
            _row(op="decode_attention", m=32, n=2048, k=8, ms=f"{decode * 1.2:.6f}"),
            _row(op="decode_attention", m=3, n=2048, k=8, ms="0.1")]
    path = tmp_path / "k.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows(rows)
    assert load_script(COMPARE).main([str(path)]) == 0
    out = capsys.readouterr().out
    assert "tables: vllm 0.24.0 on h200" in out
    assert "150,106,652,672 bytes" in out
    lines = [ln for ln in out.splitlines() if ln.startswith("| grid |")]
    assert len(lines) == 2
    assert "| bf16 | 1024 | 4096 | 4096 |" in lines[0] and "| +10.0% |" in lines[0]
    cells = [c.strip() for c in lines[1].split("|")]
    assert cells[-3] == "2.00x" and cells[-2] == f"{bf16 / fp8:.2f}x"
    assert "bf16 GEMMs: median |error| 10.0%, worst 10.0% over 1 rows" in out
    assert "refused on the device: grid fp8 m=16: RuntimeError: refused" in out
    # The table's full-attention (window 0) bf16 row at 4,096 tokens.
    assert "| 4096 | 0.5000 | 0.2677 | +86.8% |" in out
    # Decode: 20% over the table's row; a batch the table did not time has no figure.
    assert f"| 32 | 2048 | {decode * 1.2:.4f} | {decode:.4f} | +20.0% |" in out
    assert "| 3 | 2048 | 0.1000 | - | - |" in out
    assert "decode attention: median |error| 20.0%, worst 20.0% over 1 rows" in out
    # Decode rows are not GEMMs: the bf16 summary still counts the one GEMM row.
    assert "bf16 GEMMs: median |error| 10.0%, worst 10.0% over 1 rows" in out


@needs_tables
def test_the_lent_h200s_kernels_against_the_tables(capsys: pytest.CaptureFixture[str]) -> None:
    """The kernel check of the first GPU run (an H200, docs/data/h200-2026-12-04) set
    against the H200 tables: the figures docs/measured-profiles.md quotes. The memory it
    reports is the H200 entry of the GPU table, to the byte."""
    from sim.cost.gpus import GPUS
    path = ROOT / "docs" / "data" / "h200-2026-12-04" / "kernels-cuda.csv"
    assert load_script(COMPARE).main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith("device NVIDIA H200 (torch 2.11.0+cu130), tables: vllm 0.24.0 on h200")
    assert f"memory the device reports: {GPUS['h200'].mem_bytes:,} bytes (143,156 MiB)" in out
    assert "bf16 GEMMs: median |error| 7.8%, worst 34.4% over 56 rows" in out
    assert "fp8 GEMMs: median |error| 14.7%, worst 40.8% over 56 rows" in out
    assert "refused on the device" not in out
    # gate+up at 8,192 tokens: 1.85x faster in fp8 on the device, 2.12x in the tables.
    assert ("| gate_up | fp8 | 8192 | 28672 | 4096 | 1.5850 | 1.3471 | +17.7% | 1.85x "
            "| 2.12x |") in out
    assert "| 8192 | 0.9015 | 0.9383 | -3.9% |" in out


def test_kernel_compare_refuses_other_files(tmp_path: Path,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    path = tmp_path / "x.csv"
    path.write_text("a,b\n1,2\n")
    assert load_script(COMPARE).main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "not a kernel_check CSV" in err and "x.csv" in err
    assert len(err.splitlines()) == 1


@pytest.mark.parametrize(("col", "value", "expected"), [
    ("ms", "fast", "a number"), ("m", "1.5", "a whole number"),
    ("memory_bytes", "", "a whole number")])
def test_kernel_compare_names_a_bad_cell(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                         col: str, value: str, expected: str) -> None:
    path = tmp_path / "k.csv"
    with path.open("w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=FIELDS)
        w.writeheader()
        w.writerows([_row(ms="0.1"), _row(**{col: value})])
    assert load_script(COMPARE).main([str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err
    assert "k.csv" in err and "line 3" in err
    assert f"column {col}: got {value!r}, expected {expected}" in err


def test_own_operators_against_the_h200_table_profile(capsys: pytest.CaptureFixture[str]
                                                      ) -> None:
    """docs/scripts/own_vs_tables.py on the first GPU run's llama-3-8b operators against
    the shipped H200 vLLM profile: the figures docs/validation.md ("GPU") quotes."""
    script = load_script(ROOT / "docs" / "scripts" / "own_vs_tables.py")
    path = ROOT / "docs" / "data" / "h200-2026-12-04" / "cuda-llama-3-8b.csv"
    assert script.main([str(path)]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"{path}: its operators against profile h200-llama-3-8b-tp1-vllm: "
                          "llama-3-8b at tp 1, measured kernels: vLLM 0.24.0 on H200")
    assert "linear: median |error| 63.9%, signed median +63.9% over 33 points" in out
    assert "prefill_attention: median |error| 394.8%, signed median +394.8% over 33 points" in out
    assert "decode_attention: median |error| 407.3%, signed median +407.3% over 53 points" in out
    assert "lm_head: median |error| 23.7%, signed median +23.7% over 23 points" in out
    # One point by hand: 8,192 tokens through a layer's linear stack, 6.7369 ms timed.
    assert "| n=8192 | 6.7369 | 5.4180 | +24.3% |" in out


def test_own_vs_tables_names_a_file_that_is_not_a_calibration(tmp_path: Path,
                                                              capsys: pytest.CaptureFixture[str]
                                                              ) -> None:
    """A file without a calibration's columns, or with a row that is not a measurement,
    is one line naming the file (and the line), as ``calibrate --refit`` says it."""
    script = load_script(ROOT / "docs" / "scripts" / "own_vs_tables.py")
    bad = tmp_path / "k.csv"
    bad.write_text("component,label,status,median_s\nlinear,n=1,ok,0.001\n")
    assert script.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: ") and "k.csv" in err and "not a calibration CSV" in err
    assert "\n" not in err
    real = ROOT / "docs" / "data" / "h200-2026-12-04" / "cuda-llama-3-8b.csv"
    head, first, *_ = real.read_text().splitlines()
    bad.write_text(f"{head}\n{first}\n{first.replace(',1:128,', ',1;128,')}\n")
    assert script.main([str(bad)]) == 2
    err = capsys.readouterr().err.strip()
    assert "k.csv" in err and "line 3" in err and "not a measurement row" in err, err
    assert "\n" not in err


@needs_tables
def test_gpu_report_on_the_lent_h200s_files(tmp_path: Path) -> None:
    """scripts/gpu_report.sh on the first GPU run's files (no profile or replays came
    back): the log, both comparisons with the figures the docs quote, the validation
    skipped with its reason, exit 0."""
    out = tmp_path / "out"
    out.mkdir()
    data = ROOT / "docs" / "data" / "h200-2026-12-04"
    for name in ("gpu_check.log", "kernels-cuda.csv", "cuda-llama-3-8b.csv"):
        (out / name).write_bytes((data / name).read_bytes())
    rep = tmp_path / "rep"
    rc, md = gpu_report(out, rep)
    assert rc == 0, md
    assert "== validate: skipped, no profile" in md  # the device's own log
    assert "bf16 GEMMs: median |error| 7.8%, worst 34.4% over 56 rows" in md
    assert "## llama-3-8b's operators against h200-llama-3-8b-tp1-vllm" in md
    assert "linear: median |error| 63.9%" in md
    assert f"skipped: no {out}/validate-*.tar.gz" in md
    # A step that fails is reported and makes the exit 1; the rest still run.
    (out / "kernels-cuda.csv").write_text("not,a,kernel,file\n")
    rc, md = gpu_report(out, rep)
    assert rc == 1 and "exit 2" in md and "linear: median |error| 63.9%" in md
