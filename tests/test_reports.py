"""Self-describing outputs: reports of every command's folder, CSV descriptions and units,
``--percentiles``, ``--json``, saturated rows in ``compare``, the CDF plot's marks, and
the HTML reports rendered in a real headless browser."""

from __future__ import annotations

import base64
import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import yaml

from sim.cli import main as cli_main
from sim.config import scenario
from sim.core.engine import simulate
from sim.report import human
from sim.report.cdfplot import plot_cdfs
from sim.report.csvmeta import csv_header, internal_name
from sim.report.metrics import per_request
from sim.study.sweep import POINT_COLUMNS, SWEEP_COLUMNS, read_csv

ROOT = Path(__file__).resolve().parents[1]
MIXED = ROOT / "scenarios" / "mixed-chat-summarize.yaml"
MD1 = ROOT / "scenarios" / "capacity-md1.yaml"
TINY = {
    "name": "tiny-cmp",
    "model": "tiny",
    "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
    "serving": {"policy": "chunked", "block_size": 4, "max_num_batched_tokens": 256},
    "workload": {"arrivals": {"process": "poisson", "rate": 6},
                 "lengths": {"prompt": {"dist": "uniform", "low": 8, "high": 200},
                             "output": {"dist": "uniform", "low": 2, "high": 40}},
                 "num_requests": 120, "seed": 3},
    "slo": {"ttft_s": 0.5, "tpot_s": 0.05},
}
KINDS = ("simulate", "compare", "sweep", "capacity")
# One worker builds the four folders and starts the browsers (tests/conftest.py's groups).
pytestmark = pytest.mark.xdist_group("reports")


def tiny(tmp: Path) -> Path:
    path = tmp / "tiny.yaml"
    path.write_text(yaml.safe_dump(TINY))
    return path


@pytest.fixture(scope="module")
def folders(tmp_path_factory: Any) -> dict[str, Path]:
    """One small folder of each command, each with its report.html."""
    base = tmp_path_factory.mktemp("reports")
    out = {k: base / k for k in KINDS}
    runs = [
        ["simulate", str(MIXED), "--set", "workload.duration_s=20", "--out",
         str(out["simulate"]), "--quiet"],
        ["compare", str(tiny(base)), "--policies", "static,chunked", "--out",
         str(out["compare"])],
        ["sweep", str(MD1), "--rates", "20,80", "--set", "workload.num_requests=200",
         "--slo", "ttft_p99=0.15", "--workers", "1", "--out", str(out["sweep"]), "--quiet"],
        ["capacity", str(MD1), "--slo", "ttft_mean=0.05", "--seeds", "1", "--tol", "0.1",
         "--set", "workload.num_requests=200", "--target-rate", "40", "--workers", "1",
         "--out", str(out["capacity"]), "--quiet"],
    ]
    for argv in runs:
        assert cli_main(argv) == 0
    for folder in out.values():
        assert cli_main(["report", str(folder)]) == 0
    return out


def answer(html_text: str) -> str:
    return re.search(r'<p class="answer">(.*?)</p>', html_text)[1]  # type: ignore[index]


def visible(html_text: str) -> str:
    """The page's text: tags and embedded images removed, entities decoded."""
    import html

    text = re.sub(r"<style>.*?</style>", "", html_text, flags=re.S)
    return html.unescape(re.sub(r"<[^>]+>", " ", re.sub(r'src="[^"]*"', "", text)))


# -- numbers and names for people --------------------------------------------------------
def test_numbers_are_written_for_people() -> None:
    assert [human.ms(x) for x in (0.3675, 0.0347, 0.00853, 11.3016, 0.0004, None)] == [
        "368 ms", "34.7 ms", "8.53 ms", "11,302 ms", "0.400 ms", "–"]
    assert human.tok_s(6130.2) == "6,130 tok/s"  # never 6.13e+03
    assert human.req_s(11.187) == "11.2 req/s"
    assert human.number(1.2e-5) == "0.0000120" and human.number(0.0) == "0"
    assert human.pct(0.9962) == "99.6%" and human.pct(0.99957) == "99.96%"
    assert human.pct(0.999999) == ">99.99%" and human.pct(1.0) == "100.0%"
    assert human.count(10108) == "10,108"


def test_preset_names_are_written_as_their_makers_write_them() -> None:
    assert [human.model_name(m) for m in ("llama-3-8b", "qwen3-30b-a3b", "mixtral-8x7b",
                                          "llama-3.3-70b-fp8", "tiny", "my-model")] == [
        "Llama-3-8B", "Qwen3-30B-A3B", "Mixtral-8x7B", "Llama-3.3-70B-FP8", "tiny",
        "my-model"]
    assert human.gpu_name("h100-sxm") == "H100-SXM"
    sim = {"model": {"name": "llama-3-8b"}, "cost_source": "roofline",
           "pools": {"both": {"gpu": "h200", "tp": 2, "replicas": 3}}}
    assert human.setup_phrase(sim) == "Llama-3-8B on 6× H200 (3 replicas × tp 2)"
    assert human.setup_with_cost(sim) == "Llama-3-8B on 6× H200 (3 replicas × tp 2; roofline)"


# -- the reports ------------------------------------------------------------------------
def test_simulate_report_opens_with_the_answer(folders: dict[str, Path]) -> None:
    text = (folders["simulate"] / "report.html").read_text()
    s = json.loads((folders["simulate"] / "summary.json").read_text())
    lat, sat = s["latency_s"], s["saturation"]
    cost = ("measured kernels: vLLM 0.24.0 on H100-SXM; steps over 512 tokens without CUDA "
            "graphs; async scheduling")
    assert s["cost_source"] == cost
    want = (f"Llama-3-8B on 1× H100-SXM (tp 1; {cost}), chunked policy: at "
            f"{sat['offered_rps']:.3g} req/s offered, TTFT p99 "
            f"{human.ms(lat['ttft']['p99'])} and TPOT p99 {human.ms(lat['tpot']['p99'])}; "
            f"{human.pct(s['throughput']['slo_attainment'])} of requests meet their "
            "class's SLO.")
    assert answer(text) == want.replace("'", "&#x27;")
    assert f"<h1>mixed-chat-summarize: Llama-3-8B on 1× H100-SXM (tp 1), cost: {cost}</h1>" in text
    for heading in ("Latency", "Requests and throughput", "Per workload class",
                    "What was simulated"):
        assert f"<h2>{heading}</h2>" in text
    assert s["simulated"]["sha256"] in text


@pytest.mark.parametrize("kind", KINDS)
def test_reports_print_no_exponents_and_caption_in_words(folders: dict[str, Path],
                                                         kind: str) -> None:
    text = (folders[kind] / "report.html").read_text()
    words = visible(text)
    # 6.13e+03 and the like (a SHA-256 digest's hex, 1e6, is no exponent)
    assert not re.search(r"\d[eE][+-]\d", words), re.search(r".{40}\d[eE][+-]\d.{20}", words)
    captions = re.findall(r"<figcaption>(.*?)</figcaption>", text)
    assert captions and len(captions) == text.count("<img ")
    for c in captions:
        assert not c.endswith(".png") and len(c.split()) >= 15
    # Model, GPU and cost source in the title of every kind.
    h1 = re.search(r"<h1>(.*?)</h1>", text)[1]  # type: ignore[index]
    assert "H100-SXM" in h1 and "cost: " in h1 and "tp " in h1
    assert "What was simulated" in text


def test_compare_marks_saturated_rows(folders: dict[str, Path]) -> None:
    summaries = json.loads((folders["compare"] / "compare.json").read_text())
    verdict = {p: int(s["saturation"]["saturated"]) for p, s in summaries.items()}
    assert verdict == {"static": 1, "chunked": 0}  # static cannot keep up with 6 req/s
    rows = list(np.genfromtxt(folders["compare"] / "compare.csv", delimiter=",", names=True,
                              dtype=None, encoding="utf-8"))
    assert {str(r["policy"]): int(r["saturated"]) for r in rows} == verdict
    text = (folders["compare"] / "report.html").read_text()
    table = text.split("<h2>Policies side by side</h2>")[1].split("</table>")[0]
    assert re.findall(r'<tr class="saturated"><td>(\w+)</td>', table) == ["static"]
    c = summaries["chunked"]
    assert answer(text) == (
        "tiny on 1× H100-SXM (tp 1; linear cost model, given coefficients), 2 policies on "
        "the same 120 requests: chunked serves the most within the SLO ("
        f"{human.req_s(c['throughput']['goodput_requests_per_s'])}; TTFT p99 "
        f"{human.ms(c['latency_s']['ttft']['p99'])}, TPOT p99 "
        f"{human.ms(c['latency_s']['tpot']['p99'])}); saturated (did not keep up): static.")


def test_compare_table_says_saturated(tmp_path: Path, capsys: Any) -> None:
    assert cli_main(["compare", str(tiny(tmp_path)), "--policies", "static,chunked",
                     "--no-plots", "--out", str(tmp_path / "c")]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[1].split()[-1] == "saturated" and lines[1].split()[4] == "ttft_p50_ms"
    assert lines[2].split()[0] == "static" and lines[2].endswith("SATURATED")
    assert lines[3].split()[0] == "chunked" and not lines[3].endswith("SATURATED")
    assert lines[4].startswith("SATURATED: the waiting queue kept growing")


def test_sweep_and_capacity_answers(folders: dict[str, Path]) -> None:
    grid = read_csv(folders["sweep"] / "sweep.csv")
    ok = [g for g in grid if not g["saturated"] and g["ttft_p99"] <= 0.15]
    assert ok  # 20 req/s passes on one replica
    best = max(g["rate"] for g in ok)
    text = (folders["sweep"] / "report.html").read_text()
    assert f"the highest rate that met TTFT p99 ≤ 150 ms without saturating is {best:g} req/s" \
        in answer(text)
    n_sat = sum(1 for g in grid if g["saturated"])
    assert answer(text).endswith(f"; {n_sat} of {len(grid)} points saturated.")
    cap = json.loads((folders["capacity"] / "capacity.json").read_text())
    text = (folders["capacity"] / "report.html").read_text()
    b = cap["best"]
    assert (f"for 40 req/s within TTFT mean ≤ 50 ms, the cheapest configuration is "
            f"{b['policy']} on {b['replicas']} replica(s) × tp {b['tp']} = {b['gpus']}× "
            "H100-SXM") in answer(text)


# -- CSVs: one unit convention, and a description beside each --------------------------
@pytest.mark.parametrize("kind", KINDS)
def test_every_csv_is_described_beside_it(folders: dict[str, Path], kind: str) -> None:
    csvs = sorted(folders[kind].glob("*.csv"))
    assert csvs
    for path in csvs:
        meta = json.loads(path.with_name(path.name + ".meta.json").read_text())
        head = path.read_text().splitlines()[0].split(",")
        assert meta["file"] == path.name and [c["name"] for c in meta["columns"]] == head
        assert "seconds" in meta["units"]
        for col in meta["columns"]:
            assert not col["name"].endswith("_ms")  # one convention: seconds
            if col["name"].endswith("_s"):
                assert col["unit"] == "s", col
        assert all(c["meaning"] for c in meta["columns"]), path
        sim = meta["simulated"]
        assert sim["model"]["name"] in ("llama-3-8b", "tiny")
        assert sim["pools"]["both"]["gpu"] == "h100-sxm" and sim["cost_source"]
        # Loadable as plain CSV: one header line, no comment lines.
        table = np.genfromtxt(path, delimiter=",", names=True, dtype=None, encoding="utf-8")
        assert len(table.dtype.names) == len(head)
    assert "varied" in meta or kind == "simulate"


def test_study_column_names_carry_units_and_read_back() -> None:
    for col in [*POINT_COLUMNS, *SWEEP_COLUMNS, "max_rate_per_replica", "ci_low", "per_seed"]:
        assert internal_name(csv_header(col)) == col
    assert csv_header("ttft_p99") == "ttft_p99_s" and csv_header("ttft_p99_ci") == "ttft_p99_ci_s"
    assert csv_header("rate") == "rate_rps" and csv_header("output_tps") == "output_tps"
    assert csv_header("queue_growth_s") == "queue_growth_s"


# -- --percentiles and --json -----------------------------------------------------------
def test_percentiles_and_json(tmp_path: Path, capsys: Any) -> None:
    path = tiny(tmp_path)
    assert cli_main(["simulate", str(path), "--out", str(tmp_path / "a"), "--no-plots",
                     "--percentiles", "50,90,99,99.9", "--json"]) == 0
    out = capsys.readouterr().out
    assert out == (tmp_path / "a" / "summary.json").read_text()  # the summary, nothing else
    s = json.loads(out)
    assert list(s["latency_s"]["ttft"]) == ["p50", "p90", "p99", "p99.9", "mean", "max"]
    ttft = np.genfromtxt(tmp_path / "a" / "requests.csv", delimiter=",", names=True,
                         dtype=None, encoding="utf-8")["ttft_s"]
    ttft = ttft[np.isfinite(ttft)]
    # requests.csv keeps nanoseconds: the percentile of its column agrees to that.
    assert s["latency_s"]["ttft"]["p99.9"] == pytest.approx(np.percentile(ttft, 99.9), abs=2e-9)
    assert cli_main(["simulate", str(path), "--out", str(tmp_path / "b"), "--no-plots",
                     "--percentiles", "99.9,50"]) == 0
    head = capsys.readouterr().out.splitlines()[3].split()
    assert head == ["metric", "(ms)", "p50", "p99.9", "mean", "max"]
    # The default list, given in any order, writes the default summary byte for byte.
    for name, extra in (("c", []), ("d", ["--percentiles", "99,95,90,50"])):
        assert cli_main(["simulate", str(path), "--out", str(tmp_path / name), "--quiet",
                         "--no-plots", *extra]) == 0
    assert (tmp_path / "c" / "summary.json").read_bytes() == \
        (tmp_path / "d" / "summary.json").read_bytes()


@pytest.mark.parametrize("value", ["abc", "0", "101", "50,50", ",", "nan", "-5", "50,,99"])
def test_bad_percentiles_are_one_line_errors(tmp_path: Path, capsys: Any, value: str) -> None:
    for cmd in ("simulate", "compare"):
        assert cli_main([cmd, str(tiny(tmp_path)), "--out", str(tmp_path / "o"),
                         "--percentiles", value]) == 2
        err = capsys.readouterr().err
        assert err.startswith(f"servesim: error: --percentiles {value}: ") and err.count("\n") == 1
        assert "above 0 and at most 100" in err
        # A value left out is named as such, not dropped and not called a bad number.
        assert (": an empty item; expected" in err) == (value in (",", "50,,99"))
    assert not (tmp_path / "o").exists()  # refused before anything ran


def test_json_on_stdout_of_every_study(folders: dict[str, Path], tmp_path: Path,
                                       capsys: Any) -> None:
    assert cli_main(["compare", str(tiny(tmp_path)), "--policies", "static,chunked",
                     "--no-plots", "--out", str(tmp_path / "c"), "--json",
                     "--percentiles", "50,99.9"]) == 0
    out = capsys.readouterr().out
    assert out == (tmp_path / "c" / "compare.csv").with_name("compare.json").read_text()
    assert list(json.loads(out)["chunked"]["latency_s"]["tpot"])[:2] == ["p50", "p99.9"]
    head = (tmp_path / "c" / "compare.csv").read_text().splitlines()[0]
    assert "ttft_p99.9_s" in head and "e2e_p99.9_s" in head
    # Capacity and sweep run again from copies of the fixture's caches: no simulation.
    for kind in ("capacity", "sweep"):
        shutil.copytree(folders[kind] / "cache", tmp_path / kind / "cache")
    assert cli_main(["capacity", str(MD1), "--slo", "ttft_mean=0.05", "--seeds", "1", "--tol",
                     "0.1", "--set", "workload.num_requests=200", "--target-rate", "40",
                     "--workers", "1", "--out", str(tmp_path / "capacity"), "--json"]) == 0
    out = capsys.readouterr().out
    assert out == (tmp_path / "capacity" / "capacity.json").read_text()
    assert out == (folders["capacity"] / "capacity.json").read_text()
    assert cli_main(["sweep", str(MD1), "--rates", "20,80", "--set", "workload.num_requests=200",
                     "--slo", "ttft_p99=0.15", "--workers", "1", "--out",
                     str(tmp_path / "sweep"), "--json", "--no-plots"]) == 0
    blob = json.loads(capsys.readouterr().out)
    assert blob["sweep"]["simulated"]["model"]["name"] == "tiny"
    assert [g["rate_rps"] for g in blob["grid"]] == [20.0, 80.0]
    assert "ttft_p99_s" in blob["grid"][0]


# -- the CDF plot ----------------------------------------------------------------------
def test_cdf_plot_marks_slos_percentiles_and_classes(tmp_path: Path) -> None:
    res = simulate(scenario.load(MIXED, ["workload.duration_s=20"]))
    curves = plot_cdfs({"run": res}, tmp_path / "a.png", "title")
    lat = per_request(res)
    klass = res.requests.klass
    assert klass is not None
    for k, name in enumerate(res.requests.class_names):
        v = lat["ttft"][(klass == k) & np.isfinite(lat["ttft"])] * 1e3
        xs, ys = curves[f"ttft|{name}|cdf"]
        assert xs == pytest.approx(np.sort(v).tolist())
        assert ys == pytest.approx((np.arange(1, v.size + 1) / v.size).tolist())
    assert curves["ttft|chat|slo"][0] == [500.0, 500.0]
    assert curves["ttft|summarize|slo"][0] == [3000.0, 3000.0]
    assert curves["tpot|summarize|slo"][0] == [100.0, 100.0]
    v = lat["tpot"][np.isfinite(lat["tpot"])] * 1e3
    assert curves["tpot|run|marks"] == (pytest.approx(np.percentile(v, [50, 99]).tolist()),
                                        [0.5, 0.99])
    plot_cdfs({"run": res}, tmp_path / "b.png", "title")
    assert (tmp_path / "a.png").read_bytes() == (tmp_path / "b.png").read_bytes()
    # Without classes: one SLO line per panel, the scenario's.
    res = simulate(scenario.load(tiny(tmp_path)))
    curves = plot_cdfs({"x": res, "y": res}, tmp_path / "c.png")
    assert curves["ttft|all|slo"][0] == [500.0, 500.0] and "ttft|y|marks" in curves


# -- in a real browser -----------------------------------------------------------------
CHROMIUM = next((p for p in (shutil.which(n) for n in ("chromium", "chromium-browser",
                                                          "google-chrome")) if p), None)
needs_browser = pytest.mark.skipif(CHROMIUM is None, reason="no chromium binary on PATH "
                                   "(make test installs Debian's chromium when it can)")
# Counts the page's images and those the browser could not decode, once all have loaded.
PROBE = ("<script>window.addEventListener('load',function(){var im=document.images,b=0;"
         "for(var i=0;i<im.length;i++){if(!im[i].complete||im[i].naturalWidth===0)b++;}"
         "document.body.setAttribute('data-images',im.length);"
         "document.body.setAttribute('data-broken',b);});</script>")


def chromium_args(profile: Path, *args: str) -> list[str]:
    assert CHROMIUM is not None
    return [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu",
            "--disable-background-networking", "--disable-component-update", "--disable-sync",
            "--no-first-run", f"--user-data-dir={profile}", *args]


@pytest.fixture(scope="module")
def rendered(folders: dict[str, Path], tmp_path_factory: Any) -> dict[str, tuple[Path, str]]:
    """Each report (with :data:`PROBE` added) rendered by chromium: its screenshot and
    DOM after load, one browser start per report, the four started at once."""
    tmp = tmp_path_factory.mktemp("browser")
    procs = {}
    for kind in KINDS:
        page = tmp / f"{kind}.html"
        page.write_text((folders[kind] / "report.html").read_text().replace(
            "</body>", PROBE + "</body>"))
        procs[kind] = subprocess.Popen(
            chromium_args(tmp / f"profile-{kind}", f"--screenshot={tmp / kind}.png",
                          "--window-size=1200,2000", "--dump-dom", page.as_uri()),
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
    out = {}
    for kind, proc in procs.items():
        dom, _ = proc.communicate(timeout=120)
        out[kind] = (tmp / f"{kind}.png", dom)
    return out


@needs_browser
@pytest.mark.parametrize("kind", KINDS)
def test_report_renders_in_a_browser(rendered: dict[str, tuple[Path, str]], kind: str) -> None:
    from matplotlib.image import imread

    shot, _ = rendered[kind]
    assert shot.is_file()
    px = imread(shot)[..., :3]
    assert px.shape[:2] == (2000, 1200)
    inked = (px.min(axis=2) < 0.9).mean()  # share of pixels that are not (near) white
    assert inked > 0.02, inked
    rgb = (px * 255).astype(np.uint32)
    colours = np.unique((rgb[..., 0] << 16) | (rgb[..., 1] << 8) | rgb[..., 2])
    assert colours.size > 50  # text, tables and plots, not one flat fill


@needs_browser
@pytest.mark.parametrize("kind", KINDS)
def test_no_broken_images(folders: dict[str, Path], rendered: dict[str, tuple[Path, str]],
                          kind: str) -> None:
    text = (folders[kind] / "report.html").read_text()
    images = re.findall(r'<img [^>]*src="data:image/png;base64,([^"]+)"', text)
    assert images
    for data in images:
        assert base64.b64decode(data, validate=True)[:8] == b"\x89PNG\r\n\x1a\n"
    assert 'src="' not in text.replace('src="data:image/png;base64,', "")  # nothing fetched
    # The browser decoded every image: none left without a size after the page loaded.
    body = re.search(r"<body ([^>]*)>", rendered[kind][1])
    assert body, rendered[kind][1][:500]
    assert f'data-images="{len(images)}"' in body[1] and 'data-broken="0"' in body[1], body[1]


def test_percentiles_keep_their_digits() -> None:
    """99.99999 had been labelled p100 (six significant digits), and 99.99999 with
    99.999999 refused as "given twice"; labels keep ten digits, and two values that still
    share one are named."""
    from sim.errors import ServesimError
    from sim.report.metrics import parse_percentiles, stat_key

    assert [stat_key(p) for p in (50, 99.9, 99.99999, 100)] == ["p50", "p99.9", "p99.99999",
                                                                 "p100"]
    assert parse_percentiles("99.99999,99.999999") == (99.99999, 99.999999)
    with pytest.raises(ServesimError, match=r"percentile 99\.99999999 is given as "
                                            r"99\.999999991 and 99\.999999994, which round"):
        parse_percentiles("99.999999991,99.999999994")
    # One past ten digits would head its column as another percentile.
    with pytest.raises(ServesimError, match=r"percentile 99\.9999999999999 has more than 10 "
                                            r"significant digits and would be labelled p100"):
        parse_percentiles("50,99.9999999999999")


def test_a_refused_run_is_reported_as_refused(tmp_path: Path, capsys: Any) -> None:
    """simulate, compare and sweep refuse a run that rejected too many requests after
    writing its outputs; the folder records the refusal, and `report` opens with it
    instead of presenting the tails of the requests that were served."""
    path = tiny(tmp_path)
    long = ["--set", "workload.lengths.prompt={dist: uniform, low: 8, high: 6000}",
            "--set", "workload.num_requests=30"]
    runs = {"simulate": ["simulate", str(path), "--quiet", *long],
            "compare": ["compare", str(path), "--policies", "static,chunked", *long],
            "sweep": ["sweep", str(path), "--rates", "2", "--workers", "1", "--quiet", *long]}
    for kind, argv in runs.items():
        out = tmp_path / kind
        assert cli_main([*argv, "--no-plots", "--out", str(out)]) == 2, kind
        err = capsys.readouterr().err.strip()
        main_file = {"simulate": "summary.json", "compare": "compare.json",
                     "sweep": "sweep.json"}[kind]
        blob = json.loads((out / main_file).read_text())
        refused = ([s["refused"] for s in blob.values()] if kind == "compare"
                   else [blob["refused"]])
        assert err == f"servesim: error: {refused[0]}", kind
        assert cli_main(["report", str(out), "--out", str(tmp_path / f"{kind}.md")]) == 0
        text = (tmp_path / f"{kind}.md").read_text()
        assert f"**REFUSED: the command exited with an error after writing these outputs " \
               f"({'; '.join(refused)})" in text, kind
