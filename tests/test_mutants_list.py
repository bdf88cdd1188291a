"""The deliberate-fault list (scripts/mutants.py) stays applicable: every fault's snippet
occurs exactly once in its file and its tests exist. A refactor that moves the code a
fault mutates must re-point the fault, or the fault checker stops before running."""

from __future__ import annotations

import importlib.util
import shlex
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[1]


def _mutants() -> ModuleType:
    spec = importlib.util.spec_from_file_location("mutants", ROOT / "scripts" / "mutants.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    # Its dataclasses look their module up by name while the class is built.
    sys.modules.setdefault("mutants", mod)
    spec.loader.exec_module(mod)
    return mod


def test_every_fault_applies_once_and_names_existing_tests() -> None:
    m = _mutants()
    assert m.check_snippets(ROOT, list(m.FAULTS)) == []
    names = [f.name for f in m.FAULTS]
    assert len(names) == len(set(names))
    for f in m.FAULTS:
        for arg in f.tests:
            path = shlex.split(arg)[0].split("::")[0]
            assert not path.endswith(".py") or (ROOT / path).is_file(), (f.name, path)
