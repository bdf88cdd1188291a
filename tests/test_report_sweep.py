"""Sweep and capacity plots (data behind each curve = the CSV) and `servesim report`."""

from __future__ import annotations

import base64
import re
from pathlib import Path

import pytest

from sim.cli import main as cli_main
from sim.report import plots
from sim.report.slospec import parse_slos
from sim.study.sweep import SweepSpec, read_csv, run_sweep
from sim.study.sweeppoint import read_raw

ROOT = Path(__file__).resolve().parents[1]
MD1 = ROOT / "scenarios" / "capacity-md1.yaml"
SLOS = ["ttft_p99=0.15", "ttft_mean=0.05", "tpot_p99=0.05"]


@pytest.fixture(scope="module")
def sweep_dir(tmp_path_factory) -> Path:
    """Two configurations (1 and 2 replicas) x 4 rates x 2 seeds; output 3 tokens so TPOT
    exists; the top rate saturates one replica."""
    out = tmp_path_factory.mktemp("sweep")
    raw = read_raw(MD1, ["workload.num_requests=400", "workload.lengths.output.value=3",
                         "serving.max_num_seqs=4", "slo.ttft_s=0.2"])
    spec = SweepSpec(raw, str(MD1), MD1.parent, [10.0, 20.0, 40.0, 80.0], ["continuous"],
                     [1, 2], [1], [0, 1], slos=parse_slos(SLOS))
    run_sweep(spec, out, workers=2)
    return out


def test_plots_exist_and_curves_equal_the_csv(sweep_dir, tmp_path):
    for name in ("latency_vs_rate.png", "throughput_vs_rate.png", "frontier.png"):
        assert (sweep_dir / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    grid = read_csv(sweep_dir / "sweep.csv")
    configs = plots.by_config(grid)
    assert list(configs) == ["continuous, 1 replica, tp 1", "continuous, 2 replicas, tp 1"]
    assert any(g["saturated"] for g in grid)  # 80 req/s exceeds one replica

    lat = plots.latency_vs_rate(grid, parse_slos(SLOS), {"ttft_s": 0.2}, tmp_path / "l.png")
    thr = plots.throughput_vs_rate(grid, tmp_path / "t.png")
    fr = plots.frontier(grid, parse_slos(SLOS), tmp_path / "f.png")
    assert (tmp_path / "l.png").read_bytes() == (sweep_dir / "latency_vs_rate.png").read_bytes()
    for label, rows in configs.items():
        rates = [r["rate"] for r in rows]
        for metric in ("ttft", "tpot", "e2e"):
            for stat in ("p50", "p90", "p99"):
                xs, ys = lat[f"{metric}|{label}|{stat}"]
                assert xs == rates
                assert ys == pytest.approx([r[f"{metric}_{stat}"] * 1e3 for r in rows])
        # A mean target on TTFT draws the mean curve too.
        assert lat[f"ttft|{label}|mean"][1] == pytest.approx([r["ttft_mean"] * 1e3
                                                              for r in rows])
        assert "tpot|" + label + "|mean" not in lat
        sat = [r for r in rows if r["saturated"]]
        if sat:
            assert lat[f"ttft|{label}|saturated"][0] == [r["rate"] for r in sat]
        for col in ("throughput_rps", "goodput_rps"):
            xs, ys = thr[f"requests|{label}|{col}"]
            assert xs == rates and ys == pytest.approx([r[col] for r in rows])
        assert thr[f"tokens|{label}|output_tps"][1] == pytest.approx([r["output_tps"]
                                                                      for r in rows])
        xs, ys = fr[f"ttft|{label}|p99"]
        assert xs == pytest.approx([r["output_tps"] for r in rows])
        assert ys == pytest.approx([r["ttft_p99"] * 1e3 for r in rows])
    # The frontier holds unsaturated points only, none beaten on both axes by another.
    fx, fy = fr["ttft|frontier|p99"]
    unsat = [(r["output_tps"], r["ttft_p99"] * 1e3) for r in grid if not r["saturated"]]
    for x, y in zip(fx, fy, strict=True):
        assert (x, pytest.approx(y)) in [(a, pytest.approx(b)) for a, b in unsat]
        assert not any(a >= x and b < y and (a, b) != (x, y) for a, b in unsat)


def test_pareto():
    # (throughput, latency): (1, 5) and (2, 3) are beaten by (2, 1).
    pts = [(1.0, 5.0), (2.0, 3.0), (3.0, 4.0), (4.0, 10.0), (2.0, 1.0)]
    assert plots.pareto(pts) == [(2.0, 1.0), (3.0, 4.0), (4.0, 10.0)]
    assert plots.pareto([]) == []


def test_html_report_is_self_contained(sweep_dir, capsys):
    assert cli_main(["report", str(sweep_dir)]) == 0
    text = (sweep_dir / "report.html").read_text()
    imgs = re.findall(r'src="data:image/png;base64,([^"]+)"', text)
    assert len(imgs) == 3
    assert base64.b64decode(imgs[0]) == (sweep_dir / "latency_vs_rate.png").read_bytes()
    assert "<table>" in text and "TTFT p99 ≤ 150 ms" in text
    assert ("<h1>capacity-md1: tiny on H100-SXM (tp 1), cost: linear cost model, given "
            "coefficients</h1>") in text
    results = text.split("<h2>Sweep results</h2>")[1].split("</table>")[0]
    # header + 2 configurations x 4 rates, the saturated ones marked
    assert results.count("<tr") == 1 + 8
    grid = read_csv(sweep_dir / "sweep.csv")
    assert results.count('<tr class="saturated">') == sum(1 for g in grid if g["saturated"])
    assert 'src="' not in text.replace('src="data:', "")  # nothing fetched from elsewhere


def test_markdown_report(sweep_dir, tmp_path):
    out = tmp_path / "r.md"
    assert cli_main(["report", str(sweep_dir), "--format", "md", "--out", str(out)]) == 0
    text = out.read_text()
    links = re.findall(r"!\[[^]]*\]\(([^)]+)\)", text)
    assert len(links) == 3 and all((out.parent / link).resolve().is_file() for link in links)
    assert "| continuous | 2 | 1 | 80 req/s | 2 |" in text


def test_capacity_report(tmp_path):
    out = tmp_path / "cap"
    assert cli_main(["capacity", str(MD1), "--slo", "ttft_mean=0.05", "--seeds", "2", "--set",
                     "workload.num_requests=500", "--target-rate", "60", "--out", str(out),
                     "--quiet"]) == 0
    assert cli_main(["report", str(out)]) == 0
    text = (out / "report.html").read_text()
    assert "Highest rate per replica" in text
    assert "for 60 req/s within TTFT mean ≤ 50 ms, the cheapest configuration is" in text
    assert "cost: linear cost model, given coefficients</h1>" in text
    assert text.count("data:image/png;base64,") == 1


def test_report_on_a_folder_without_results(tmp_path, capsys):
    assert cli_main(["report", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "no summary.json, compare.json, sweep.json or capacity.json here" in err
    assert err.count("\n") == 1
