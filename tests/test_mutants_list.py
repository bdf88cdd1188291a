"""The deliberate-fault list (scripts/mutants.py) stays applicable: every fault's snippet
occurs exactly once in its file and its tests exist. A refactor that moves the code a
fault mutates must re-point the fault, or the fault checker stops before running."""

from __future__ import annotations

import shlex
from pathlib import Path

from conftest import load_script

ROOT = Path(__file__).resolve().parents[1]


def test_every_fault_applies_once_and_names_existing_tests() -> None:
    m = load_script(ROOT / "scripts" / "mutants.py")
    assert m.check_snippets(ROOT, list(m.FAULTS)) == []
    names = [f.name for f in m.FAULTS]
    assert len(names) == len(set(names))
    for f in m.FAULTS:
        for arg in f.tests:
            path = shlex.split(arg)[0].split("::")[0]
            assert not path.endswith(".py") or (ROOT / path).is_file(), (f.name, path)
