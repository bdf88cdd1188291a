"""sim.cost.profile and sim.cost.profilefile: schema checks, shipped-name lookup and vectorised
evaluation (no torch)."""

from __future__ import annotations

import dataclasses
import math
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml

from sim.cost.presets import MODELS
from sim.cost.profile import FORMS, wake_curve
from sim.cost.profilecost import ProfileCost
from sim.cost.profilefile import PROFILE_DIR, load_profile, parse_profile
from sim.cost.profilekeys import SCHEMA
from sim.cost.shape import StepShape, decode_shape, shape_of
from sim.errors import ServesimError

COEFS = {
    "step": {"const_s": 1e-3, "per_seq_s": 1e-5, "per_new_token_s": 1e-6, "per_group_s": 4e-6,
             "group_seqs": 8.0},
    "linear": {"const_s": 1e-5, "weight_s": 2e-4, "per_token_s": 1e-6},
    "prefill_attention": {"const_s": 3e-6, "per_seq_s": 1e-5, "per_token_s": 1e-7,
                          "per_context_token_s": 1e-8,
                          "per_self_pair_s": 2e-10, "per_block_pair_s": 3e-11,
                          "block_tokens": 64.0, "per_context_pair_s": 1e-10},
    "decode_attention": {"const_s": 5e-6, "per_seq_s": 1e-6, "per_group_s": 3e-6,
                         "group_seqs": 10.0, "per_kv_token_s": 1e-8, "per_spill_token_s": 2e-8,
                         "spill_kv": 15.0},
    "lm_head": {"const_s": 1e-5, "weight_s": 1e-4, "per_seq_s": 1e-6},
    "allreduce": {"per_step_s": 0.0, "per_token_s": 0.0},
    "in_situ": {"const_s": 2e-6, "multi_s": 3e-6, "per_seq_s": 1e-7, "sat_seqs": 1.5,
                "per_kv_token_s": 1e-9, "evict_kv": 12.0, "per_prefill_s": 4e-6,
                "per_prefill_pair_s": 1e-11},
    "host": {"const_s": 2e-5, "per_seq_s": 3e-6},
    # A dense model's: no entry is ever past a top-k (tests/test_dsa.py prices one).
    "sparse_prefill": {"per_token_s": 0.0, "topk_tokens": 1e9},
}


def profile_data() -> dict:
    return {"schema": SCHEMA, "device": {"name": "test"}, "dtype": "bf16", "tp": 1,
            "model": dataclasses.asdict(MODELS["llama-3-8b"]),
            "components": {k: {"coef": dict(v)} for k, v in COEFS.items()}}


def write(tmp_path: Path, data: dict, name: str = "p.yaml") -> Path:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(data))
    return path


def test_hand_computed_step_time(tmp_path: Path) -> None:
    cost = load_profile(str(write(tmp_path, profile_data())))
    # One prefill of 100 new tokens after 50 cached, plus 2 decodes at context 9.
    s = shape_of([(100, 50), (1, 9), (1, 9)])
    assert s.prefill_pairs == 100 * 50 + 100 * 101 // 2 and s.decode_kv == 20
    step = 1e-3 + 1e-5 * 3 + 1e-6 * 102 + 4e-6 * 2
    linear = 1e-5 + max(2e-4, 1e-6 * 102)
    # One chunk: its own pairs 100·101/2, 100·min(100, 64) in tiles past the triangle,
    # and 100·50 pairs to its cached context.
    prefill = 3e-6 + 1e-5 + 1e-7 * 100 + 1e-8 * 50 + 2e-10 * 5050 + 3e-11 * 100 * 64 + 1e-10 * 5000
    decode = 5e-6 + 1e-6 * 2 + 3e-6 * 2 + 1e-8 * 20 + 2e-8 * (20 - 15)
    head = 1e-5 + max(1e-4, 1e-6 * 3)
    in_situ = 2e-6 + 3e-6 + 1e-7 * min(2, 1.5) + 1e-9 * min(20, 12) + 4e-6 * 1 + 1e-11 * 10050
    host = 2e-5 + 3e-6 * 3
    expected = step + 32 * (linear + prefill + decode + in_situ) + head + host
    got = cost.step_time(s)
    assert isinstance(got, float)
    assert got == pytest.approx(expected, rel=1e-12)
    # The device's part is all but the serving loop's host work.
    assert cost.device_time(s) == pytest.approx(expected - host, rel=1e-12)


def test_vectorised_matches_scalar(tmp_path: Path) -> None:
    cost = load_profile(str(write(tmp_path, profile_data())))
    shapes = [decode_shape(8, 4000), shape_of([(512, 0)]), shape_of([(64, 128), (1, 5)]),
              decode_shape(1, 1)]
    arrays = StepShape(*(np.array(col) for col in zip(*shapes, strict=True)))
    vec = cost.step_time(arrays)
    assert isinstance(vec, np.ndarray) and vec.shape == (4,)
    np.testing.assert_allclose(vec, [cost.step_time(s) for s in shapes], rtol=1e-12)
    # A decode-free step pays no decode constant, and in situ only its prefill's share;
    # one decode entry does not pay the several-entries term.
    parts = cost.breakdown(shape_of([(512, 0)]))
    assert parts["decode_attention"] == 0
    assert parts["in_situ"] == pytest.approx(32 * (4e-6 + 1e-11 * (512 * 513 // 2)))
    one = cost.breakdown(decode_shape(1, 5))["in_situ"]
    assert one == pytest.approx(32 * (2e-6 + 1e-7 + 1e-9 * 6))


def test_with_layers_scales_per_layer_terms_only(tmp_path: Path) -> None:
    cost = load_profile(str(write(tmp_path, profile_data())))
    s = decode_shape(4, 400)
    full, half = cost.breakdown(s), cost.with_layers(16).breakdown(s)
    assert half["linear"] == pytest.approx(full["linear"] / 2)
    assert half["lm_head"] == full["lm_head"]


def test_relative_path_resolves_against_base_dir(tmp_path: Path) -> None:
    write(tmp_path, profile_data(), "mine.yaml")
    cost = load_profile("mine.yaml", base_dir=tmp_path)
    assert isinstance(cost, ProfileCost) and cost.model.name == "llama-3-8b" and cost.tp == 1


@pytest.mark.parametrize(("mutate", "where"), [
    (lambda d: d.update(schema="servesim-profile/9"), "schema"),
    (lambda d: d["components"].pop("in_situ"), "components.in_situ"),
    (lambda d: d.pop("tp"), "tp"),
    (lambda d: d["components"].pop("linear"), "components.linear"),
    (lambda d: d["components"]["linear"]["coef"].update(weight_s=-1.0),
     "components.linear.coef.weight_s"),
    (lambda d: d["components"]["step"]["coef"].update(bogus=1.0), "components.step.coef.bogus"),
    (lambda d: d["components"]["step"]["coef"].update(const_s="fast"),
     "components.step.coef.const_s"),
    (lambda d: d["model"].update(layers=0), "model.layers"),
])
def test_malformed_profile_names_file_and_key(tmp_path: Path, mutate, where: str) -> None:
    data = profile_data()
    mutate(data)
    path, msg = load_error(tmp_path, data)
    assert str(path) in msg and where in msg and "\n" not in msg


def load_error(tmp_path: Path, data: dict) -> tuple[Path, str]:
    """(file written, the one-line error loading it raised)."""
    path = write(tmp_path, data)
    with pytest.raises(ServesimError) as err:
        load_profile(str(path))
    return path, str(err.value)


def test_profile_without_newer_coefficients_keeps_its_formula(tmp_path: Path) -> None:
    """Schema-2 files written before the tiled-prefill and in-situ step terms existed
    load with neutral values and price every step as they did."""
    data = profile_data()
    for name, keys in (("prefill_attention", ("const_s", "per_block_pair_s", "block_tokens")),
                       ("in_situ", ("multi_s", "sat_seqs", "per_prefill_s", "per_prefill_pair_s"))):
        for k in keys:
            del data["components"][name]["coef"][k]
    cost = load_profile(str(write(tmp_path, data)))
    s = shape_of([(100, 50), (1, 9), (1, 9)])
    parts = cost.breakdown(s)
    old_prefill = 1e-5 + 1e-7 * 100 + 1e-8 * 50 + 2e-10 * 5050 + 1e-10 * 5000
    assert parts["prefill_attention"] == pytest.approx(32 * old_prefill, rel=1e-12)
    assert parts["in_situ"] == pytest.approx(32 * (2e-6 + 1e-7 * 2 + 1e-9 * 12), rel=1e-12)


def test_bad_yaml_and_unknown_name(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("schema: [unclosed\n")
    with pytest.raises(ServesimError, match="not valid YAML"):
        load_profile(str(bad))
    with pytest.raises(ServesimError, match=r"unknown profile 'no-such-gpu'; `servesim profile "
                                            r"list` shows the \d+ shipped"):
        load_profile("no-such-gpu")
    with pytest.raises(ServesimError, match="does not exist"):
        load_profile("missing.yaml", base_dir=tmp_path)
    with pytest.raises(ServesimError, match=r"profile file '.*/sub' is a directory, not a file"):
        (tmp_path / "sub").mkdir()
        load_profile(str(tmp_path / "sub"))
    with pytest.raises(ServesimError, match="must be a YAML mapping"):
        parse_profile([1, 2], "x.yaml")


def test_old_schema_says_to_recalibrate(tmp_path: Path) -> None:
    data = profile_data()
    data["schema"] = "servesim-profile/1"
    with pytest.raises(ServesimError, match="older calibrate.*calibrate` again"):
        load_profile(str(write(tmp_path, data)))


def test_pairs_split_into_own_and_context() -> None:
    cost = ProfileCost(MODELS["tiny"], 1, "t", "fp32", {
        k: {c: 0.0 for c in v} for k, v in COEFS.items()})
    # Equal chunks are split exactly: 2 chunks of 64 after 100 cached, with decodes beside.
    s = shape_of([(64, 100), (64, 100), (1, 7)])
    only = {"per_self_pair_s": 1.0}
    c = {**cost.coefs["prefill_attention"], **only}
    assert FORMS["prefill_attention"].evaluate(c, s) == pytest.approx(2 * 64 * 65 / 2)
    c = {**cost.coefs["prefill_attention"], "per_context_pair_s": 1.0}
    assert FORMS["prefill_attention"].evaluate(c, s) == pytest.approx(2 * 64 * 100)
    # No prefill at all: both are zero, with no division by zero.
    assert FORMS["prefill_attention"].evaluate(c, decode_shape(3, 30)) == 0


def test_every_form_lists_its_coefficients() -> None:
    assert set(FORMS) == set(COEFS)
    for name, form in FORMS.items():
        assert set(form.coefs) == set(COEFS[name])


def test_sim_profile_imports_without_torch_or_simpy() -> None:
    code = ("import sys; sys.modules['torch'] = None; sys.modules['simpy'] = None; "
            "import sim.cost.profile, sim.cost.profilefile; print('ok')")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=Path(__file__).parents[1], check=True)
    assert out.stdout.strip() == "ok"


def tabled_data() -> dict:
    data = profile_data()
    # Per-layer linear stack measured at 1..4 tokens, LM head at 1..2 sequences.
    data["components"]["linear"]["table_s"] = [3e-4, 5e-4, 7e-4, 4e-4]
    data["components"]["lm_head"]["table_s"] = [2e-4, 6e-4]
    return data


def test_measured_table_replaces_formula_at_its_counts(tmp_path: Path) -> None:
    cost = load_profile(str(write(tmp_path, tabled_data())))
    plain = load_profile(str(write(tmp_path, profile_data(), "plain.yaml")))
    # Three decodes: 3 new tokens (table 7e-4 per layer), 3 sequences (past the head's
    # table: its last row, 6e-4 at 2, times the formula's growth from 2 to 3, none here).
    s = decode_shape(3, 300)
    parts, base = cost.breakdown(s), plain.breakdown(s)
    assert parts["linear"] == pytest.approx(32 * 7e-4, rel=1e-12)
    assert base["lm_head"] == pytest.approx(1e-5 + max(1e-4, 3e-6))
    assert parts["lm_head"] == pytest.approx(6e-4, rel=1e-12)
    assert cost.step_time(s) - plain.step_time(s) == pytest.approx(
        32 * (7e-4 - (1e-5 + max(2e-4, 3e-6))) + 6e-4 - (1e-5 + max(1e-4, 3e-6)), rel=1e-9)
    # Four tokens cost less than three, as measured; past them the formula's growth from
    # the last row, so five tokens cost no less than four (the formula alone had dropped
    # to base_linear(plain, 5) where the table stops).
    assert cost.breakdown(decode_shape(4, 300))["linear"] == pytest.approx(32 * 4e-4)
    assert cost.breakdown(decode_shape(5, 300))["linear"] == pytest.approx(
        32 * 4e-4 * base_linear(plain, 5) / base_linear(plain, 4), rel=1e-12)
    assert cost.breakdown(decode_shape(2, 10))["lm_head"] == pytest.approx(6e-4)
    # A 300-token prefill is far past the linear table; its one sequence's head row is not.
    big = shape_of([(300, 0)])
    parts, base = cost.breakdown(big), plain.breakdown(big)
    assert parts["linear"] == pytest.approx(
        32 * 4e-4 * base["linear"] / base_linear(plain, 4), rel=1e-12)
    assert parts["lm_head"] == 2e-4


def base_linear(cost: ProfileCost, n: int) -> float:
    return float(cost.breakdown(decode_shape(n, 300))["linear"])


def test_tabled_vectorised_matches_scalar(tmp_path: Path) -> None:
    cost = load_profile(str(write(tmp_path, tabled_data())))
    shapes = [decode_shape(b, 100 * b) for b in range(1, 7)] + [shape_of([(3, 0)]),
                                                              shape_of([(40, 0), (1, 3)])]
    arrays = StepShape(*(np.array(col) for col in zip(*shapes, strict=True)))
    vec = cost.step_time(arrays)
    scalar = [cost.step_time(s) for s in shapes]
    assert vec.tolist() == scalar  # bit for bit: the same floats from the same table
    # numpy integers in a scalar shape take the same path as Python ints.
    s64 = StepShape(*(np.int64(v) for v in decode_shape(3, 300)))
    assert float(cost.step_time(s64)) == cost.step_time(decode_shape(3, 300))


@pytest.mark.parametrize(("mutate", "where", "says"), [
    (lambda d: d["components"]["decode_attention"].update(table_s=[1e-4]),
     "components.decode_attention.table_s",
     "components with one: linear, prefill_attention, lm_head"),
    (lambda d: d["components"]["linear"].update(table_s=[1e-4, -2e-4]),
     "components.linear.table_s[1]", "> 0"),
    (lambda d: d["components"]["linear"].update(table_s=[]),
     "components.linear.table_s", "non-empty list"),
    (lambda d: d["components"]["lm_head"].update(table_s={"1": 1e-4}),
     "components.lm_head.table_s", "seqs = 1, 2"),
    (lambda d: d["components"]["linear"].update(table_s=[1e-4, True]),
     "components.linear.table_s[1]", "finite number"),
    (lambda d: d.update(schema="servesim-profile/2"),
     "components.linear.table_s", "need schema 'servesim-profile/3'"),
])
def test_bad_table_names_file_key_and_rule(tmp_path: Path, mutate, where: str, says: str) -> None:
    data = tabled_data()
    mutate(data)
    path, msg = load_error(tmp_path, data)
    assert str(path) in msg and where in msg and says in msg and "\n" not in msg


def test_schema_2_profiles_still_load(tmp_path: Path) -> None:
    data = profile_data()
    data["schema"] = "servesim-profile/2"
    cost = load_profile(str(write(tmp_path, data)))
    assert cost.tables == {}
    assert cost.step_time(decode_shape(3, 300)) == load_profile(
        str(write(tmp_path, profile_data(), "new.yaml"))).step_time(decode_shape(3, 300))


def test_profiles_without_host_work_price_it_zero(tmp_path: Path) -> None:
    """Files written before the host component existed load, and price it at 0 s."""
    data = profile_data()
    del data["components"]["host"]
    cost = load_profile(str(write(tmp_path, data)))
    s = decode_shape(4, 400)
    assert cost.breakdown(s)["host"] == 0
    assert cost.step_time(s) == cost.device_time(s)
    with_host = load_profile(str(write(tmp_path, profile_data(), "h.yaml")))
    assert with_host.step_time(s) - cost.step_time(s) == pytest.approx(2e-5 + 3e-6 * 4)


def test_wake_term_prices_the_step_after_an_idle_spell(tmp_path: Path) -> None:
    """max_s x (1 - exp(-idle / tau_s)); nothing after no idle, nothing without the term;
    the step's own price is unchanged."""
    data = profile_data()
    data["components"]["wake"] = {"coef": {"max_s": 8e-4, "tau_s": 0.01}}
    cost = load_profile(str(write(tmp_path, data)))
    assert cost.wake_time(0.0) == 0.0
    assert cost.wake_time(0.01) == pytest.approx(8e-4 * (1 - math.exp(-1)), rel=1e-12)
    assert cost.wake_time(5.0) == pytest.approx(8e-4, rel=1e-12)
    plain = load_profile(str(write(tmp_path, profile_data(), "plain.yaml")))
    assert plain.wake_time(1.0) == 0.0
    s = shape_of([(100, 0)])
    assert cost.step_time(s) == plain.step_time(s)
    assert cost.with_layers(2).wake_time(0.01) == cost.wake_time(0.01)
    # The one formula, on arrays too (calibrate.wake fits it).
    np.testing.assert_allclose(wake_curve(np.array([0.01, 5.0]), 8e-4, 0.01),
                               [8e-4 * (1 - math.exp(-1)), 8e-4 * (1 - math.exp(-500))])


@pytest.mark.parametrize(("mutate", "where", "says"), [
    (lambda d: d["components"]["wake"]["coef"].update(tau_s=0.0),
     "components.wake.coef.tau_s", "> 0"),
    (lambda d: d["components"]["wake"]["coef"].update(max_s=-1e-3),
     "components.wake.coef.max_s", ">= 0"),
    (lambda d: d["components"]["wake"]["coef"].update(after_s=1.0),
     "components.wake.coef.after_s", "allowed: max_s, tau_s"),
    (lambda d: d["components"]["wake"]["coef"].pop("tau_s"),
     "components.wake.coef.tau_s", "missing"),
    (lambda d: d.update(schema="servesim-profile/3"), "components.wake",
     "needs schema 'servesim-profile/4'"),
    (lambda d: d["components"].update(lm_haed={"coef": {}}), "components.lm_haed",
     "unknown component; allowed: step, linear"),
    (lambda d: d["components"]["step"].update(tables=[1e-3]), "components.step.tables",
     "unknown key; allowed: coef, fit, formula, grid, per_layer, table_at, table_s"),
    (lambda d: d.update(schema="servesim-profile/5") or d["components"].update(
        frontend={"coef": {"request_s": 0.01, "per_prompt_token_s": 0.0, "response_s": 1e30,
                           "jitter_s": 0.0}}),
     "components.frontend.coef.response_s", "got 1e+30, must be at most 3600"),
])
def test_bad_wake_or_component_names_file_key_and_rule(tmp_path: Path, mutate, where: str,
                                                      says: str) -> None:
    data = profile_data()
    data["components"]["wake"] = {"coef": {"max_s": 8e-4, "tau_s": 0.01}}
    mutate(data)
    path, msg = load_error(tmp_path, data)
    assert str(path) in msg and where in msg and says in msg and "\n" not in msg


def test_declared_reads_and_gates_are_what_each_formula_uses() -> None:
    """The scalar path keeps a light component's price per its declared `reads` and skips
    a gated one when its count is zero: each formula must depend on nothing else, and be
    zero without its gate (random coefficients and shapes)."""
    rng = np.random.default_rng(7)
    fields = StepShape._fields
    for name, form in FORMS.items():
        coef = {k: float(rng.uniform(1e-6, 1e-3)) for k in form.coefs}
        for k in form.knees:
            coef[k] = float(rng.uniform(1, 5000))
        for _ in range(50):
            entries = [(int(rng.integers(1, 3000)) if rng.random() < 0.3 else 1,
                        int(rng.integers(0, 4000))) for _ in range(int(rng.integers(1, 9)))]
            s = shape_of(entries)
            base = float(form.evaluate(coef, s))
            if form.reads:
                other = shape_of([(int(rng.integers(1, 3000)), int(rng.integers(0, 4000)))])
                mixed = StepShape(*(getattr(s, f) if f in form.reads else getattr(other, f)
                                    for f in fields))
                assert float(form.evaluate(coef, mixed)) == base, name
            if form.gate:
                dec = shape_of([(1, c) for _, c in entries])
                assert getattr(dec, form.gate) == 0 and float(form.evaluate(coef, dec)) == 0


def test_a_scenarios_profile_errors_name_the_key_once_or_the_profile_file(tmp_path: Path) -> None:
    from sim.config.scenario import from_dict
    from sim.cost.models import build_cost

    def cost_of(ref: str) -> None:
        wl = {"arrivals": {"process": "poisson", "rate": 1.0}, "num_requests": 1,
              "lengths": {"prompt": {"dist": "fixed", "value": 8},
                          "output": {"dist": "fixed", "value": 2}}}
        build_cost(from_dict({"model": "llama-3-8b", "cost": {"profile": ref},
                              "workload": wl}, "<s>"))

    with pytest.raises(ServesimError) as exc:
        cost_of("h100-sxm-llama-3-8b-tp1-vlm")
    assert str(exc.value).startswith("<s>: cost.profile: unknown profile "
                                     "'h100-sxm-llama-3-8b-tp1-vlm'; nearest: "
                                     "h100-sxm-llama-3-8b-tp1-vllm, ")
    # A fault inside the file is the file's, at its line, not under the scenario's key.
    cut = tmp_path / "cut.yaml"
    whole = (PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text()
    cut.write_text(whole[:whole.index("model: {") + 20])  # inside a flow mapping
    with pytest.raises(ServesimError, match=rf"^{cut}: line \d+: not valid YAML"):
        cost_of(str(cut))
    # Another model's profile: the fields that differ, not two whole specs.
    with pytest.raises(ServesimError) as exc:
        cost_of("h100-sxm-qwen3-32b-tp2-vllm")
    assert str(exc.value) == (
        "<s>: cost.profile: profile h100-sxm-qwen3-32b-tp2-vllm was measured for another "
        "setup: model (layers 64 != 32, hidden 5120 != 4096, heads 64 != 32, intermediate "
        "25600 != 14336, vocab 151936 != 128256); tp 2 != 1")


def test_knots_of_unequal_length_name_table_s_and_both_counts() -> None:
    import yaml

    data = yaml.safe_load((PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text())
    lin = data["components"]["linear"]
    lin["table_s"] = lin["table_s"][:-1]
    with pytest.raises(ServesimError, match=rf"components.linear.table_s: table_s has "
                                            rf"{len(lin['table_s'])} times for the "
                                            rf"{len(lin['table_at'])} counts of table_at"):
        parse_profile(data, "cut.yaml")


@pytest.mark.parametrize("axis", ["table_at", "seqs", "kv_per_seq"])
def test_knots_out_of_order_name_the_axis_index_and_values(axis: str) -> None:
    """A swapped or repeated knot names its axis (grid.seqs, not "grid rows"), its index
    and both values, as every other profile fault names index and value."""
    import yaml

    data = yaml.safe_load((PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text())
    if axis == "table_at":
        xs, where = data["components"]["linear"]["table_at"], "components.linear.table_at"
        xs[4] = xs[3]  # a repeated count
    else:
        xs = data["components"]["decode_attention"]["grid"][axis]
        where = f"components.decode_attention.grid.{axis}"
        xs[2], xs[3] = xs[3], xs[2]  # two swapped
    with pytest.raises(ServesimError) as exc:
        parse_profile(data, "p.yaml")
    i = 4 if axis == "table_at" else 3
    assert str(exc.value) == (f"p.yaml: {where}[{i}]: got {xs[i]:g}, not above "
                              f"{axis}[{i - 1}] = {xs[i - 1]:g}; {axis} must be strictly "
                              "increasing")


@pytest.mark.parametrize("axis", ["table_at", "seqs", "kv_per_seq"])
def test_a_fractional_knot_count_is_refused(axis: str) -> None:
    """Knots sit at whole token, sequence or context counts (every shipped profile's
    do): a fraction there, a hand edit, had been read as a count."""
    import yaml

    data = yaml.safe_load((PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml").read_text())
    if axis == "table_at":
        xs, where = data["components"]["linear"]["table_at"], "components.linear.table_at"
    else:
        xs = data["components"]["decode_attention"]["grid"][axis]
        where = f"components.decode_attention.grid.{axis}"
    xs[1] = (xs[0] + xs[1]) / 2 + 0.5 if (xs[0] + xs[1]) % 2 == 0 else (xs[0] + xs[1]) / 2
    with pytest.raises(ServesimError) as exc:
        parse_profile(data, "p.yaml")
    assert str(exc.value).startswith(f"p.yaml: {where}[1]: got {xs[1]!r}, must be a whole "
                                     "number >= 1 (")


@pytest.mark.parametrize("name, counts", [
    # Past the GEMM knots (32,768 tokens) the formula had priced alone: a 32,769-token
    # prefill came to 13.2 s after 19.9 s at 32,768 on an L40S.
    ("l40s-qwen3-32b-tp1-sglang-fp8", (32768, 32769, 40000, 65536)),
    # Below a sparse-attention table's first knot (4 tokens) the formula had priced a
    # 3-token prefill at 9.2 ms against 53.9 ms at 4.
    ("b200-deepseek-v3.2-tp8-sglang", (2, 3, 4, 5)),
    # Four L40S: the all-reduce had crossed from the custom kernel's table to NCCL's at
    # 8 MiB, 241 ms at 1,024 tokens and 181 ms at 1,025 (sim/cost/tables/commtable.py).
    ("l40s-llama-3-8b-tp4-sglang", (1024, 1025, 2048)),
])
def test_measured_prices_do_not_jump_where_the_knots_end(name: str,
                                                         counts: tuple[int, ...]) -> None:
    cost = load_profile(str(PROFILE_DIR / f"{name}.yaml"))
    times = [cost.step_time(shape_of([(n, 0)])) for n in counts]
    assert times == sorted(times)
    for a, b, na, nb in zip(times, times[1:], counts, counts[1:], strict=False):
        # At most as a prefill's attention grows, or a GEMM tile edge (1,024 -> 1,025).
        assert b / a <= max((nb / na) ** 2, 1.1)
    # One shape at a time and as an array give the same floats.
    arrays = StepShape(*(np.asarray(v) for v in zip(*(shape_of([(n, 0)]) for n in counts),
                                                   strict=True)))
    assert cost.step_time(arrays).tolist() == times


def test_a_knotted_component_is_held_below_its_first_knot_and_scaled_past_its_last() -> None:
    from sim.cost.curves import Knots

    k = Knots((4.0, 8.0), (2.0, 3.0))
    assert k.outside(2.0, 0.5, 6.0) == 2.0  # held at the first knot's time
    assert k.outside(0.0, 0.5, 6.0) == 0.5  # no count: the formula's (a gate's zero)
    assert k.outside(16.0, 12.0, 6.0) == 3.0 * 12.0 / 6.0  # the formula's growth from 8
    assert k.outside(16.0, 12.0, None) == 12.0 == k.outside(16.0, 12.0, 0.0)
    x = np.array([0.0, 2.0, 4.0, 6.0, 8.0, 16.0])
    f = np.array([0.5, 0.5, 9.0, 9.0, 9.0, 12.0])
    assert k.over_edges(x, f, 6.0).tolist() == [0.5, 2.0, 2.0, 2.5, 3.0, 6.0]


def test_decode_attention_reads_its_kv_no_faster_than_memory_allows() -> None:
    """The tables time one layer, whose KV (67 MB at 4 x 4,096 tokens of Llama-3-8B)
    fits an L40S's 96 MB L2; a step's 32 layers each read their own from DRAM. The grid
    had priced it 3.3x faster than 4 x 4,096 x 128 KiB at the L40S's peak 864 GB/s."""
    cost = load_profile(str(PROFILE_DIR / "l40s-llama-3-8b-tp1-sglang.yaml"))
    bw = 864e9
    kv_token = 2 * 32 * 8 * 128 * 2  # K and V, 32 layers, 8 heads of 128, bf16
    s = decode_shape(4, 4 * 4095)  # each entry reads its 4,095 cached tokens and its own
    floor = 4 * 4096 * kv_token / bw
    assert cost.breakdown(s)["decode_attention"] == pytest.approx(floor, rel=1e-12)
    assert floor > 2.4e-3 > 3 * cost.grids["decode_attention"].at(4, 4096) * 32
    # Where the grid is slower than the floor (one short sequence) it prices as before.
    one = decode_shape(1, 128)
    grid = cost.grids["decode_attention"].at(1, 129) * 32  # 128 cached and its own
    assert cost.breakdown(one)["decode_attention"] == pytest.approx(grid, rel=1e-12)
    assert grid > 128 * kv_token / bw
    # A run of draft-sized steps (sim.cost.profilecost.ProfileCost.decode_run) sums the
    # steps it stands for, the floor included.
    steps = [decode_shape(4, 4 * 4095 + i * 4) for i in range(3)]
    assert cost.decode_run(4, 4 * 4096 - 4, 3) == pytest.approx(
        sum(cost.step_time(s) for s in steps), rel=1e-12)
    # No floor where a layer reads fewer than every cached token; on an H100 the grid is
    # above it everywhere.
    assert load_profile(str(PROFILE_DIR / "b200-gpt-oss-20b-tp1-vllm.yaml")).kv_floor == 0.0
    h100 = load_profile(str(PROFILE_DIR / "h100-sxm-llama-3-8b-tp1-vllm.yaml"))
    for b, c in ((1, 129), (4, 4096), (64, 4096), (256, 16384)):
        assert h100.breakdown(decode_shape(b, b * (c - 1)))["decode_attention"] == \
            h100.grids["decode_attention"].at(b, c) * 32
