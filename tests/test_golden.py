"""Golden summaries of shipped scenarios: any change in simulated behaviour shows here.

After a deliberate change, regenerate with tests/golden/regen.py and review the diff.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import pytest

from sim.config import scenario
from sim.core.engine import simulate
from sim.report.metrics import clean
from sim.report.summary import summarize

GOLDEN_DIR = Path(__file__).parent / "golden"
ROOT = Path(__file__).resolve().parent.parent


# Fields that change without any change in simulated behaviour (and, in ``simulated``,
# with the path the scenario was loaded from: the golden file's is relative).
VOLATILE = {"servesim_version", "scenario_sha256"}
VOLATILE_SIMULATED = {"servesim_version", "sha256", "file"}


def assert_close(got: Any, want: Any, path: str = "") -> None:
    if isinstance(want, dict):
        assert isinstance(got, dict) and set(got) == set(want), path
        for k in want:
            assert_close(got[k], want[k], f"{path}.{k}")
    elif isinstance(want, list):
        assert isinstance(got, list) and len(got) == len(want), path
        for i, (g, w) in enumerate(zip(got, want, strict=True)):
            assert_close(g, w, f"{path}[{i}]")
    elif isinstance(want, float) and not isinstance(got, bool):
        assert isinstance(got, int | float) and math.isclose(got, want, rel_tol=1e-9,
                                                             abs_tol=1e-12), (path, got, want)
    else:
        assert got == want, (path, got, want)


@pytest.mark.parametrize("name", ["quickstart"])
def test_shipped_scenario_matches_golden_summary(name: str) -> None:
    want = json.loads((GOLDEN_DIR / f"{name}_summary.json").read_text())
    got = clean(summarize(simulate(scenario.load(ROOT / "scenarios" / f"{name}.yaml"))))
    got = json.loads(json.dumps(got))
    for key in VOLATILE:
        got.pop(key, None)
        want.pop(key, None)
    for key in VOLATILE_SIMULATED:
        got["simulated"].pop(key)
        want["simulated"].pop(key)
    assert_close(got, want)


# Digests of shipped scenarios as of the commit that added workload.stages (equal to the
# ones before it; the quickstart's as of prefix caching's default under chunked, on as
# in vLLM v1, which changed its settings). A sweep's cache and anyone comparing
# summary.json files rely on them, so a config key added later must be hashed only when
# set (metrics.scenario_digest).
DIGESTS = {
    "quickstart": "9f4bb9df7a9333643e29c13db047cb6c84a44d3b543b01e9fe149322474163b1",
    "capacity-llama8b": "2291098f2e456c06f056d4953267f3a821712f599c0ad892517b43b904acd8da",
    "closed-loop": "f708e43c47f75ad310490d58d4f9c4c3b6151b9b264d64f699746c635e030f33",
}


@pytest.mark.parametrize("name", sorted(DIGESTS))
def test_scenario_digests_survive_new_optional_keys(name: str) -> None:
    from sim.report.setup import scenario_digest

    assert scenario_digest(scenario.load(ROOT / "scenarios" / f"{name}.yaml")) == DIGESTS[name]
