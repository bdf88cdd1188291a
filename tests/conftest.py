"""Shared helpers for the test suite."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pytest

from sim.config.scenario import from_dict
from sim.core.engine import Engine, RunResult, build_cost
from sim.workload.requests import Requests


def chunk_budget(policy: str, budget: int) -> dict[str, int]:
    """The serving key of a per-iteration token ``budget`` where ``policy`` reads one
    (chunked), else nothing: another policy refuses the key."""
    return {"token_budget": budget} if policy == "chunked" else {}


def tiny_scenario(**sections: Any) -> Any:
    """A validated scenario on the tiny model with a linear cost, overridable per section."""
    raw: dict[str, Any] = {
        "model": "tiny",
        "cost": {"linear": {"step_s": 0.01, "per_new_token_s": 0.001}},
        "serving": {"policy": "continuous", "block_size": 4, "max_num_batched_tokens": 256,
                    "watermark": 0.0},
        "workload": {"arrivals": {"process": "constant", "rate": 1.0},
                     "lengths": {"prompt": {"dist": "fixed", "value": 8},
                                 "output": {"dist": "fixed", "value": 2}},
                     "num_requests": 1},
    }
    for key, value in sections.items():
        if isinstance(value, dict) and isinstance(raw.get(key), dict):
            raw[key] = {**raw[key], **value}
        else:
            raw[key] = value
    return from_dict(raw)


def run_requests(scenario: Any, arrivals: list[float], prompts: list[int], outputs: list[int],
                 log_steps: bool = True, lazy_decodes: bool = True,
                 cost: Any = None) -> RunResult:
    """Run ``scenario`` on exactly these requests (seconds, tokens), priced by ``cost``
    (None: the scenario's own, :func:`build_cost`)."""
    req = Requests(np.array(arrivals, dtype=float), np.array(prompts, dtype=np.int64),
                   np.array(outputs, dtype=np.int64))
    return Engine(scenario, req, build_cost(scenario) if cost is None else cost,
                  np.random.default_rng(0), log_steps, lazy_decodes=lazy_decodes).run()


def run_both_ways(scenario: Any, arrivals: list[float], prompts: list[int],
                  outputs: list[int]) -> RunResult:
    """Run with lazily advanced decodes (sim/core/decodeset.py) and request by request, assert
    identical outputs, return the first."""
    from sim.report.outputs import requests_csv

    runs = [run_requests(scenario, arrivals, prompts, outputs, lazy_decodes=lazy)
            for lazy in (True, False)]
    assert requests_csv(runs[0]) == requests_csv(runs[1])
    logs = [sorted(r.step_log or [], key=lambda e: (e[0], e[1])) for r in runs]
    assert logs[0] == logs[1]
    return runs[0]


def lazy_and_eager(sc: Any, requests: Requests, log: bool = True) -> list[Any]:
    """The run with lazily advanced decodes, then request by request (logs sorted)."""
    out = []
    for lazy in (True, False):
        res = Engine(sc, requests, build_cost(sc), np.random.default_rng(0), log_steps=log,
                     lazy_decodes=lazy).run()
        if res.step_log is not None:
            res.step_log.sort(key=lambda e: (e[0], e[1]))
        out.append(res)
    return out


def eager_run(sc: Any) -> RunResult:
    """``sc`` run as ``simulate`` runs it (its workload, router and fault seeds) but
    with every decode request by request, for comparison with the lazy run."""
    from sim.workload.build import build_requests

    seeds = np.random.SeedSequence(sc.workload.seed).spawn(3)
    req = build_requests(sc.workload, sc.base_dir, np.random.default_rng(seeds[0]), sc.source,
                         sc.model.max_context)
    return Engine(sc, req, build_cost(sc), np.random.default_rng(seeds[1]),
                  fault_seed=seeds[2], lazy_decodes=False).run()


def assert_equivalent(a: Any, b: Any) -> None:
    """Two runs of the same requests wrote the same logs, records and summary."""
    from sim.report.outputs import requests_csv
    from sim.report.summary import summarize

    assert a.step_log == b.step_log
    assert requests_csv(a) == requests_csv(b)
    for field in ("first_sched", "first_token", "finish", "preemptions", "status",
                  "verifies", "verify_tokens"):
        np.testing.assert_array_equal(getattr(a, field), getattr(b, field))
    assert a.itl.counts.tolist() == b.itl.counts.tolist()
    assert (a.itl.total, a.itl.zeros, a.itl.max) == (b.itl.total, b.itl.zeros, b.itl.max)
    sa, sb = summarize(a), summarize(b)
    # Repeated gaps are summed as value x count: the ITL mean may differ in its last bits.
    ia, ib = sa["latency_s"].get("itl") or {}, sb["latency_s"].get("itl") or {}
    ma, mb = ia.pop("mean", 0.0), ib.pop("mean", 0.0)
    assert (ma is None and mb is None) or ma == pytest.approx(mb, rel=1e-12)
    assert sa == sb


# The columns of the public end-to-end runs' CSV (silicon_sample.csv) that every test
# sample has; a sample of quantised or MoE rows adds the GEMM mode and the expert split.
SILICON_HEAD = ("id,silicon_data_source,backend,backend_version,model_path,system,precision,"
                "mode,isl,osl,batch_size,tp_size,pp_size,attention_dp_size,silicon_ttft_ms,"
                "silicon_tpot_ms")


def silicon_csv(tmp_path: Path, rows: list[str], extra: tuple[str, ...] = ()) -> Path:
    """A silicon_sample.csv of ``rows`` under :data:`SILICON_HEAD` plus the ``extra``
    columns, written as ``tmp_path / "s.csv"``."""
    path = tmp_path / "s.csv"
    path.write_text("\n".join([",".join([SILICON_HEAD, *extra]), *rows]) + "\n")
    return path


def e2e(test: Any) -> Any:
    """Mark an end-to-end test (pyproject.toml's ``e2e`` marker) and keep it on one
    pytest-xdist worker (``--dist loadgroup``): the end-to-end tests share one
    calibration (a session fixture is built once per worker), and each binds its thread
    to the same, highest-numbered core (calibrate.timing.pin_cores), where two at once
    would only take turns."""
    return pytest.mark.xdist_group("e2e")(pytest.mark.e2e(test))


# The one CPU calibration the end-to-end tests share (tests/test_calibrate_e2e.py and
# tests/test_validate.py): the quick grid of `tiny`, one operator pass, whole steps in
# three rounds (the round logic itself is tested with a recorder in
# tests/test_calibrate_rounds.py), and one decode-attention point made to run out of
# memory. Nothing here is asserted about how fast it ran.
E2E_OOM_LABEL = "b=32 c~512"
E2E_ROUNDS = 3
# Far more than the calibration needs (about a minute on an idle 2-core machine), so the
# budget never cuts the sweep and what the tests count does not depend on the machine's
# speed; stopping on an exhausted budget is tested on its own
# (test_calibrate_e2e.py::test_tiny_budget_is_a_clear_error_and_keeps_measurements).
E2E_BUDGET_S = 1800.0


@pytest.fixture(scope="session")
def cpu_calibration(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """(:class:`calibrate.run.CalibrationResult`, the thread's CPU affinity before it)."""
    torch = pytest.importorskip("torch")
    from calibrate import sweeps
    from calibrate.rounds import RoundsConfig
    from calibrate.run import CalibrationConfig, calibrate
    from sim.cost.presets import MODELS

    out = tmp_path_factory.mktemp("cal") / "cpu-tiny.yaml"
    real = sweeps.Bench._callable

    def flaky(self: Any, point: Any) -> Any:
        if point.component == "decode_attention" and point.label == E2E_OOM_LABEL:
            raise torch.OutOfMemoryError("CUDA out of memory (injected by the test)")
        return real(self, point)

    mp = pytest.MonkeyPatch()
    mp.setattr(sweeps.Bench, "_callable", flaky)
    threads = torch.get_num_threads()
    mask = os.sched_getaffinity(0)
    try:
        res = calibrate(CalibrationConfig(model=MODELS["tiny"], out=out, device="cpu",
                                          quick=True, budget_s=E2E_BUDGET_S, progress=False,
                                          passes=1, rounds=RoundsConfig(rounds=E2E_ROUNDS)))
    finally:
        mp.undo()
        torch.set_num_threads(threads)
    return res, mask


# Tests that read the public kernel tables (the `measured` extra, aiconfigurator-core),
# which `make test` installs; skipped where it is not.
needs_tables = pytest.mark.skipif(importlib.util.find_spec("aiconfigurator_core") is None,
                                  reason="the measured extra (aiconfigurator-core) is not "
                                         "installed; make test installs it")


def one_line(capsys: pytest.CaptureFixture[str]) -> str:
    """The one line a refused command wrote to stderr (no traceback, nothing more)."""
    err = capsys.readouterr().err
    assert "Traceback" not in err
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    return lines[0]


def load_script(path: Path) -> ModuleType:
    """A script of the repository (scripts/, docs/scripts/) imported as a module named
    after its file; registered first, as dataclasses defined in it need."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = mod
    spec.loader.exec_module(mod)
    return mod


def gpu_report(out: Path, rep: Path) -> tuple[int, str]:
    """scripts/gpu_report.sh on ``out`` into ``rep``, with this interpreter: (its exit
    status, the report it wrote)."""
    root = Path(__file__).resolve().parents[1]
    proc = subprocess.run(["bash", str(root / "scripts" / "gpu_report.sh"), str(out), str(rep)],
                          env={**os.environ, "PYTHON": sys.executable}, cwd=root,
                          capture_output=True, text=True, timeout=600)
    return proc.returncode, (rep / "report.md").read_text()
