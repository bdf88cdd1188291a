"""Profiles built from the public kernel tables: table reading, interpolation, the
builder's composition checked by hand against table rows, and its errors."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import yaml
from conftest import needs_tables

from sim.cost.presets import MODELS
from sim.cost.tables.gemmtable import GemmTable
from sim.cost.tables.kerneltables import Table
from sim.errors import ServesimError


def synthetic_gemm(holes: bool = False) -> GemmTable:
    """A GEMM whose time is a + b·n + c·k + d·n·k at each m (what bilinear interpolation
    reproduces exactly), on a 3 x 3 grid of n and k."""
    rows: dict[str, list[float]] = {"m": [], "n": [], "k": [], "latency": []}
    for m in (1, 2, 16):
        for n in (1024, 4096, 16384):
            for k in (1024, 4096, 16384):
                if holes and n == 16384 and k == 16384:
                    continue
                rows["m"].append(m)
                rows["n"].append(n)
                rows["k"].append(k)
                # milliseconds, as published
                rows["latency"].append(1e-3 * (5 + m * (n + 2 * k) * 1e-4 + n * k * 1e-7))
    cols = {key: np.asarray(v) for key, v in rows.items()}
    return GemmTable.from_table(Table("gemm_perf", Path("synthetic"), "0", cols))


def truth(m: float, n: float, k: float) -> float:
    return 1e-6 * (5 + m * (n + 2 * k) * 1e-4 + n * k * 1e-7)


def test_bilinear_in_n_and_k_is_exact_for_an_affine_gemm() -> None:
    g = synthetic_gemm()
    for n, k in ((1024, 4096), (6144, 14336), (3000, 1500), (16384, 16384)):
        np.testing.assert_allclose(g.times(n, k), [truth(m, n, k) for m in (1, 2, 16)],
                                   rtol=1e-12)
    # Between measured m: a line; past the grid in n: in proportion.
    assert g.at(9, 4096, 4096) == pytest.approx(
        truth(2, 4096, 4096) + (truth(16, 4096, 4096) - truth(2, 4096, 4096)) * 7 / 14)
    assert g.at(1, 32768, 4096) == pytest.approx(2 * truth(1, 16384, 4096))
    assert np.all(g.holdout_errors([(6144, 14336)]) < 1e-9)


def test_missing_cells_are_filled_in_proportion_from_the_next_smaller_n() -> None:
    g = synthetic_gemm(holes=True)
    want = [truth(m, 4096, 16384) * 16384 / 4096 for m in (1, 2, 16)]
    np.testing.assert_allclose(g.times(16384, 16384), want, rtol=1e-12)


@needs_tables
def test_tables_list_what_exists_and_follow_reuse() -> None:
    from sim.cost.tables.kerneltables import coverage, load_table

    cov = coverage()
    assert cov["h100-sxm"]["vllm"][-1] == "0.24.0" and cov["a100-80gb"]["vllm"] == ["0.14.0"]
    with pytest.raises(ServesimError, match="versions with them: 0.22.0, 0.24.0"):
        load_table("b200", "attention", "vllm", "0.9.9", "context_attention_perf")
    with pytest.raises(ServesimError, match="tables cover: a100-80gb, h100-sxm"):
        load_table("mi300x", "gemm", "vllm", "0.24.0", "gemm_perf")
    # TensorRT-LLM 1.3.0rc23's folder holds no GEMM table: its reuse.yaml borrows 1.3.0rc20's.
    t = load_table("b200", "gemm", "trtllm", "1.3.0rc23", "gemm_perf")
    assert t.version == "1.3.0rc20" and len(t) > 1000


@needs_tables
def test_linear_knots_are_the_table_rows_summed_by_hand() -> None:
    """A model whose four projections lie on the measured grid: each knot of the linear
    component is the four table rows at that m plus the documented elementwise term. A
    vLLM build's bf16 rows are SGLang's (random weights; vLLM's own time unwritten ones)."""
    from sim.cost.presets import MODELS
    from sim.cost.tables.kerneltables import load_table
    from sim.cost.tables.profilebuild import BuildSpec, build_profile
    from sim.cost.tables.profileparts import LAYER_ELEMENTWISE_KERNELS

    # QKV n = (32 + 2*8)*128 = 6144, o n = k = 4096, gate+up n = 16384, down k = 8192.
    model = dataclasses.replace(MODELS["llama-3-8b"], intermediate=8192, name="grid-model")
    data = build_profile(BuildSpec(model, "h100-sxm", "vllm", 1))
    rows = load_table("h100-sxm", "gemm", "sglang", "0.5.14", "gemm_perf").where(
        gemm_dtype="bfloat16", kernel_source="sglang_torch_linear").columns
    assert any(n.startswith("bf16 GEMMs priced from sglang 0.5.14's bfloat16 rows") and
               "weights never written" in n for n in data["source"]["notes"])

    def ms(m: int, n: int, k: int) -> float:
        hit = (rows["m"] == m) & (rows["n"] == n) & (rows["k"] == k)
        assert hit.sum() == 1
        return float(rows["latency"][hit][0]) / 1e3

    lin = data["components"]["linear"]
    src = data["source"]["derived"]
    per_token_bytes = 2 * (8 * 4096 + 2 * (32 + 8) * 128 + 4 * 8 * 128 + 3 * 8192)
    # vLLM runs steps of up to 512 tokens padded to a multiple of 8: the rows one past
    # an edge there (17, ..., 257) are not knots; past 512 they are.
    assert not {9, 17, 33, 129, 257} & set(lin["table_at"])
    assert {8, 16, 256, 512, 513, 4097} <= set(lin["table_at"])
    for m in (1, 16, 512, 513, 4096):
        want = (ms(m, 6144, 4096) + ms(m, 4096, 4096) + ms(m, 16384, 4096)
                + ms(m, 4096, 8192) + LAYER_ELEMENTWISE_KERNELS * src["kernel_floor_s"]
                + m * per_token_bytes / src["bandwidth_bytes_s"])
        got = lin["table_s"][lin["table_at"].index(m)]
        assert got == pytest.approx(want, rel=2e-5), m
    # The bandwidth is the table's own: a 16384 x 16384 GEMM at m = 1 streams its weights.
    assert src["bandwidth_bytes_s"] == pytest.approx(16384 * 16384 * 2 / ms(1, 16384, 16384),
                                                     rel=1e-5)
    assert lin["fit"]["interpolation"]["points"] == 0  # every shape on the grid


@needs_tables
def test_built_profile_loads_and_prices_a_step() -> None:
    from sim.cost.presets import MODELS
    from sim.cost.profilefile import parse_profile
    from sim.cost.shape import decode_shape, shape_of
    from sim.cost.tables.cli import profile_text
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    data = build_profile(BuildSpec(MODELS["llama-3-8b"], "h100-sxm", "vllm", 2))
    cost = parse_profile(yaml.safe_load(profile_text(data)), "built")
    assert cost.source == "measured kernels: vLLM 0.24.0 on H100-SXM"
    assert cost.tp == 2 and data["device"]["reported"] == "NVIDIA H100 80GB HBM3"
    one, many = cost.step_time(decode_shape(1, 1000)), cost.step_time(decode_shape(64, 64000))
    assert 0 < one < many
    # Two all-reduces per layer and one for the embedding, in the decode step.
    parts = cost.breakdown(decode_shape(8, 8000))
    assert parts["allreduce"] > 65 * 4e-6
    pre = cost.breakdown(shape_of([(2048, 0)]))
    assert pre["prefill_attention"] > 0 and pre["decode_attention"] == 0


@needs_tables
@pytest.mark.parametrize(("change", "match"), [
    ({"tp": 3}, "32 query heads do not split over tp=3"),
    # Had named only the table's file, not the option.
    ({"tp": 16}, "^--tp: got 16: the collective tables do not time 16 GPUs on h100-sxm: "
                 ".*no rows for 16 GPUs; measured: 2, 4, 8$"),
    ({"model": dataclasses.replace(MODELS["llama-3-8b"], dtype="fp32")},
     # The model's own dtype where --dtype was not given (tiny's fp32): said so.
     r"dtype 'fp32' \(of llama-3-8b, unless --dtype set it\) is not built from the tables; "
     "built: bf16, fp16, fp8, fp8-block, nvfp4: give one with --dtype"),
    ({"model": dataclasses.replace(MODELS["llama-3-8b"], dtype="fp8"), "gpu": "a100-80gb"},
     "gemm_perf.parquet: no fp8 GEMM rows; dtypes: bfloat16$"),
    ({"framework": "tgi"}, "unknown framework 'tgi'; valid: vllm, sglang, trtllm"),
    ({"version": "0.1.0"}, "got '0.1.0': no vllm tables of that version for h100-sxm; "
                           "versions: 0.24.0"),
    ({"gpu": "mi300x"}, "--gpu: no tables for GPU 'mi300x'; tables exist for: a100-80gb"),
    # A head size the attention tables never measured: said, with what they have.
    ({"model": dataclasses.replace(MODELS["llama-3-8b"], head_dim=96, name="odd")},
     "has no rows for head dim 96; its head sizes: 64, 128, 192, 256$"),
])
def test_build_errors_say_what_exists(change: dict, match: str) -> None:
    from sim.cost.tables.profilebuild import BuildSpec, build_profile

    spec = dataclasses.replace(BuildSpec(MODELS["llama-3-8b"], "h100-sxm", "vllm"), **change)
    with pytest.raises(ServesimError, match=match):
        build_profile(spec)


@needs_tables
def test_cli_builds_from_a_huggingface_config(tmp_path: Path) -> None:
    """`profile build --hf-config`: a Qwen3-8B config.json (wheel's copy) on two L40S."""
    import json

    from sim.cli import main
    from sim.cost.profilefile import load_profile

    cfg = {"model_type": "qwen3", "hidden_size": 4096, "num_attention_heads": 32,
           "num_key_value_heads": 8, "head_dim": 128, "num_hidden_layers": 36,
           "intermediate_size": 12288, "vocab_size": 151936, "torch_dtype": "bfloat16",
           "max_position_embeddings": 40960, "rope_theta": 1000000,
           "tie_word_embeddings": False, "_name_or_path": "Qwen/Qwen3-8B"}
    path = tmp_path / "config.json"
    path.write_text(json.dumps(cfg))
    out = tmp_path / "q.yaml"
    assert main(["profile", "build", "--gpu", "l40s", "--hf-config", str(path), "--tp", "2",
                 "--out", str(out)]) == 0
    cost = load_profile(str(out))
    assert cost.tp == 2 and cost.model.layers == 36 and cost.model.name == "Qwen/Qwen3-8B"
    assert cost.source == "measured kernels: vLLM 0.24.0 on L40S"
    # 16 query heads and 4 KV heads per GPU were measured as such.
    assert "decode attention: 16 heads measured" in cost.meta["source"]["notes"]


@pytest.mark.parametrize(("args", "message"), [
    (["--out", "{file}"], "--out {file}: cannot make the folder: File exists"),
    (["--check", "--out", "{missing}"], "--out {missing}: does not exist"),
    (["--check", "--out", "{file}"], "--out {file}: is not a folder of profiles to check"),
    # An empty folder had built all the profiles to say that every one was missing.
    (["--check", "--out", "{empty}"], "--out {empty}: holds none of the {n} shipped "
                                      "profiles (e.g. {first}): not a folder of shipped "
                                      "profiles"),
])
def test_ship_refuses_a_bad_folder_before_building(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        message: str) -> None:
    # Checked first: --check of a missing folder had built all 728 profiles to say so.
    from sim.cli import main
    from sim.cost.tables.cli import shipped_specs
    from sim.cost.tables.profilebuild import profile_name

    (tmp_path / "f").write_text("x")
    (tmp_path / "e").mkdir()
    specs = shipped_specs()
    paths = {"file": str(tmp_path / "f"), "missing": str(tmp_path / "none"),
             "empty": str(tmp_path / "e"), "n": str(len(specs)),
             "first": f"{profile_name(specs[0])}.yaml"}
    assert main(["profile", "ship", *(a.format(**paths) for a in args)]) == 2
    err = capsys.readouterr().err
    assert err == f"servesim: error: {message.format(**paths)}\n"


def test_build_refuses_an_out_that_would_lose_an_input(tmp_path: Path,
                                                      capsys: pytest.CaptureFixture[str]) -> None:
    """--out equal to --hf-config had replaced the config.json with the profile; --model
    with --hf-config had used one without a word."""
    from sim.cli import main

    cfg = tmp_path / "config.json"
    cfg.write_text("{}")
    base = ["profile", "build", "--gpu", "h100-sxm", "--tp", "1"]
    for args, message in (
            (["--hf-config", str(cfg), "--out", str(cfg)],
             f"--out: got {cfg}, expected a .yaml or .yml file name"),
            (["--model", "llama-3-8b", "--hf-config", str(cfg), "--out",
              str(tmp_path / "p.yaml")],
             f"--model: got --model llama-3-8b and --hf-config {cfg}; give one"),
            (["--model", "llama-3-8b", "--out", str(tmp_path)],
             f"--out: got {tmp_path}, expected a .yaml or .yml file name")):
        assert main([*base, *args]) == 2
        assert capsys.readouterr().err.startswith(f"servesim: error: {message}")
    assert cfg.read_text() == "{}"


def test_list_names_each_profiles_layout(capsys: pytest.CaptureFixture[str]) -> None:
    # A profile of 8 data-parallel ranks with expert parallelism is not one of tp 1.
    from sim.cli import main

    assert main(["profile", "list"]) == 0
    line = next(x for x in capsys.readouterr().out.splitlines()
                if x.split()[:2] == ["qwen3-235b-a22b", "h200"])
    assert "tp1 ep8 dp8 vllm" in line and "tp8 ep8 vllm" in line and "tp8 vllm" in line


def test_an_isolated_spike_in_an_attention_table_is_screened() -> None:
    """A cell over twice every neighbour, one of them a larger problem, is a glitch: set
    to its neighbours' interpolation (mean over both axes), and said; a cell that is
    twice its smaller neighbours with no larger one beside it (twice the work) stays, as
    does one at a corner (no neighbours across it to tell a trend from a glitch)."""
    from sim.cost.tables.attntables import screen_spikes

    us = 1e-6
    rows = {(b, c): (10 + b + c / 100) * us for b in (1, 2, 4) for c in (256, 512, 1024)}
    rows[(2, 512)] = 60 * us  # neighbours 16.12/19.12 (batch), 14.56/22.24 (tokens)
    rows[(4, 1024)] *= 2  # 48.48 us in the corner: no larger neighbour
    rows[(1, 256)] *= 3  # 39.84 us in the other corner: larger neighbours, none across
    out, said = screen_spikes(rows, ("batch_size", "step"))
    # Both axes interpolate the plane to 17.12 us at (2, 512).
    assert out[(2, 512)] == pytest.approx(17.12 * us)
    assert out[(4, 1024)] == rows[(4, 1024)] and out[(1, 256)] == rows[(1, 256)]
    assert {k: v for k, v in out.items() if k != (2, 512)} == {
        k: v for k, v in rows.items() if k != (2, 512)}
    assert said == ["a cell 2.7x its neighbours' largest (batch_size 2, step 512: 60.0 us) "
                    "set to 17.1 us"]
    # One key column (latent attention's token counts): nothing to screen.
    assert screen_spikes({(1,): 1.0, (2,): 9.0, (4,): 1.0}, ("num_tokens",))[1] == []


def test_build_replaces_only_a_profile_it_built(tmp_path: Path,
                                                capsys: pytest.CaptureFixture[str]) -> None:
    """--out over a scenario (or a profile calibrate wrote) is refused and the file kept;
    over a profile profile build wrote, the build runs."""
    from sim.cli import main

    base = ["profile", "build", "--gpu", "h100-sxm", "--framework", "vllm",
            "--model", "llama-3-8b", "--out"]
    scenario = tmp_path / "s.yaml"
    scenario.write_text("name: mine\n")
    calibrated = tmp_path / "c.yaml"
    calibrated.write_text("schema: servesim-profile/5\ncalibration: {grid: cpu-quick}\n")
    for path in (scenario, calibrated):
        before = path.read_text()
        assert main([*base, str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and f"--out: got '{path}', which exists and is not a " \
            "profile servesim profile build wrote" in err
        assert path.read_text() == before
    built = tmp_path / "p.yaml"
    assert main([*base, str(built)]) == 0
    assert main([*base, str(built)]) == 0


@needs_tables
@pytest.mark.parametrize("gpu", ["h200", "b200", "a100-80gb"])
def test_vllms_bf16_rows_run_fast_only_where_compute_bound(gpu: str) -> None:
    """Why vLLM builds borrow SGLang's bf16 rows: both time torch's F.linear at the same
    shapes, SGLang's with random weights, vLLM's with weights never written. Values move
    the power a tensor-core GEMM draws, so the two agree where a GEMM is memory-bound and
    vLLM's alone runs fast where it is compute-bound (medians over n x k >= 4096^2)."""
    import numpy as np

    from sim.cost.tables.kerneltables import coverage, load_table

    def rows(fw: str) -> dict[tuple[int, int, int], float]:
        c = load_table(gpu, "gemm", fw, coverage()[gpu][fw][-1], "gemm_perf").where(
            gemm_dtype="bfloat16").columns
        return {(int(m), int(n), int(k)): float(t) for m, n, k, t in
                zip(c["m"], c["n"], c["k"], c["latency"], strict=True) if n * k >= 4096 ** 2}

    vllm, sglang = rows("vllm"), rows("sglang")
    both = [s for s in vllm if s in sglang]

    def ratio(lo: int, hi: int) -> float:
        return float(np.median([sglang[s] / vllm[s] for s in both if lo <= s[0] <= hi]))

    assert 0.99 < ratio(1, 128) < 1.02
    assert ratio(256, 1 << 20) > 1.04


def test_one_grid_prices_the_rows_of_one_tile_grid_at_their_median() -> None:
    """Rows the kernel runs on one grid of tiles become their median, shape by shape (a
    spike on one row is out of it); rows outside the range keep their times."""
    g = synthetic_gemm()
    spiked = g.cube.copy()
    spiked[0] *= 1.8  # the 1-token row, as vLLM's sm100 FP8 rows time it
    t = GemmTable(g.ms, g.ns, g.ks, spiked).one_grid(1, 2)
    # Two rows in the range: their median is their mean, 1.4x the 1-token truth plus
    # half the 2-token row; the 16-token row is untouched.
    np.testing.assert_allclose(t.cube[0], (1.8 * g.cube[0] + g.cube[1]) / 2)
    np.testing.assert_allclose(t.cube[1], t.cube[0])
    np.testing.assert_array_equal(t.cube[2], g.cube[2])
    # Three rows in range, the 1-token one ten times its truth (above the 16-token row at
    # every shape): the median of the three is the 16-token row, for all three.
    tenfold = g.cube.copy()
    tenfold[0] *= 10
    three = GemmTable(g.ms, g.ns, g.ks, tenfold).one_grid(1, 16)
    for i in range(3):
        np.testing.assert_array_equal(three.cube[i], g.cube[2])
    np.testing.assert_array_equal(GemmTable(g.ms, g.ns, g.ks, spiked).one_grid(3, 8).cube,
                                  spiked)  # no row in range: unchanged


@needs_tables
@pytest.mark.parametrize("gpu", ["b200", "gb300"])
def test_vllms_sm100_fp8_rows_of_one_tile_grid_price_as_one(gpu: str) -> None:
    """vLLM's FP8 GEMM on sm100 runs 1-16 tokens on one grid of tiles; its rows agree from
    2 to 16 tokens but time 1 token 1.6-1.9x slower. The table as read prices 1-16 tokens
    at their median; an H200 (sm90, no 1-token excess) is read as published."""
    from sim.cost.tables.gemmtable import gemm_table
    from sim.cost.tables.kerneltables import coverage, load_table

    version = coverage()[gpu]["vllm"][-1]
    c = load_table(gpu, "gemm", "vllm", version, "gemm_perf").where(
        gemm_dtype="fp8").columns
    raw = {(int(m), int(n), int(k)): float(t) / 1e3 for m, n, k, t in
           zip(c["m"], c["n"], c["k"], c["latency"], strict=True)}
    big = sorted({(n, k) for m, n, k in raw if m == 1 and n * k >= 4096 ** 2
                  and all((mm, n, k) in raw for mm in range(1, 17))})
    excess = [raw[(1, n, k)] / float(np.median([raw[(m, n, k)] for m in range(2, 17)]))
              for n, k in big]
    assert np.median(excess) > 1.5
    t = gemm_table(gpu, "vllm", version, "fp8").table
    for n, k in big[:20]:
        want = float(np.median([raw[(m, n, k)] for m in range(1, 17)]))
        for m in (1, 2, 9, 16):
            assert t.at(m, n, k) == pytest.approx(want, rel=1e-12)
        assert t.at(32, n, k) == pytest.approx(raw[(32, n, k)], rel=1e-12)
    h200 = gemm_table("h200", "vllm", coverage()["h200"]["vllm"][-1], "fp8").table
    assert h200.at(1, 8192, 8192) != h200.at(2, 8192, 8192)


@pytest.mark.parametrize(("args", "message"), [
    # A folder that does not exist had been created (a typo at / made a new root folder).
    (["--model", "llama-3-8b", "--out", "{tmp}/no/such/p.yaml"],
     "--out: got {tmp}/no/such/p.yaml, in {tmp}/no/such, which is not a folder; create it "
     "first"),
    # An unknown preset had been reported without the flag that named it.
    (["--model", "bogus", "--out", "{tmp}/p.yaml"], "--model: unknown model preset 'bogus'"),
])
def test_build_refuses_before_building_naming_the_flag(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], args: list[str],
        message: str) -> None:
    from sim.cli import main

    argv = [a.format(tmp=tmp_path) for a in args]
    assert main(["profile", "build", "--gpu", "h100-sxm", *argv]) == 2
    assert f"servesim: error: {message.format(tmp=tmp_path)}" in capsys.readouterr().err
    assert not (tmp_path / "no").exists() and not (tmp_path / "p.yaml").exists()
