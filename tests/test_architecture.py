"""The layering of ``sim``: imports go one way, with no cycle, and the core stays small.

Read from the source with :mod:`ast`, so the test sees function-local imports too (an
import inside a function still ties two modules together at run time). Imports under
``if TYPE_CHECKING:`` exist for annotations only; they may point at a higher layer, and
the few that do are listed below, so that a new one is a decision, not an accident.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

SIM = Path(__file__).parents[1] / "sim"

# Layer of each unit: a package, or a group of modules inside one. A module may import
# its own unit and any lower layer at run time; units on the same layer stay independent.
# The core's state (requests, the KV manager, the prefix cache, histograms) sits below
# the policies, which read and ask it; the core's machinery (engine, replicas, decode
# set, clients, faults) sits above them and runs them.
BASE = ("sim.errors", "sim.configtools", "sim.cliargs", "sim.files", "sim.yamlload",
        "sim.figures")
CORE_STATE = ("sim.core.request", "sim.core.kvmanager", "sim.core.kvpublish", "sim.core.prefix",
              "sim.core.hosttier",
              "sim.core.histogram", "sim.core.replicastats", "sim.core.batch")
LAYERS: dict[str, int] = {
    "sim": 0,
    "sim.cost": 1, "sim.workload": 1,
    "sim.core:state": 2,
    "sim.policies": 3,
    "sim.config": 4,
    "sim.core": 5,
    "sim.report": 6,
    "sim.study": 7, "sim.validate": 7,
    "sim.cli": 8,
}
# Units below the core's machinery never start a simulation clock; calibrate imports some.
NO_SIMPY = ("sim.core:state", "sim.cost", "sim.workload", "sim.policies", "sim.config")
# Type-only references to a higher layer: (importer's package, imported package).
TYPE_ONLY_UPWARD = {
    ("sim.cost", "sim.config"),        # build_cost reads a Scenario
    ("sim.cost", "sim.core:state"),    # batch_shape reads the requests of a batch
    ("sim.policies", "sim.config"),    # a policy is built from a ServingConfig
    ("sim.policies", "sim.core"),      # admission acts on the engine's replicas
}
# The bars for the simulation's core.
CORE_PACKAGES = ("core", "policies")
MAX_MODULE_LINES = 400
MAX_FUNCTION_LINES = 60


def module_name(path: Path) -> str:
    """The dotted name of a file under sim/."""
    parts = path.relative_to(SIM.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def is_sim(module: str) -> bool:
    """Whether an imported name is part of sim (simpy is not)."""
    return module == "sim" or module.startswith("sim.")


def package_of(module: str) -> str:
    """The unit (key of :data:`LAYERS`) a module belongs to."""
    if module in BASE:
        return "sim"
    if module in CORE_STATE:
        return "sim.core:state"
    parts = module.split(".")
    return ".".join(parts[:2]) if len(parts) > 1 else module


def imports(path: Path) -> list[tuple[str, bool]]:
    """(imported module, type-only) for every ``sim``/simpy/torch import in a file."""
    found: list[tuple[str, bool]] = []

    def visit(node: ast.AST, type_only: bool) -> None:
        for child in ast.iter_child_nodes(node):
            guarded = type_only or (isinstance(child, ast.If)
                                    and "TYPE_CHECKING" in ast.unparse(child.test))
            if isinstance(child, ast.ImportFrom) and child.module and child.level == 0:
                base = child.module
                if base == "sim":  # from sim import x: x may be a package or a module
                    found.extend((f"sim.{a.name}" if (SIM / a.name).exists()
                                  or (SIM / f"{a.name}.py").exists() else "sim", guarded)
                                 for a in child.names)
                else:
                    found.append((base, guarded))
            elif isinstance(child, ast.Import):
                found.extend((a.name, guarded) for a in child.names)
            visit(child, guarded)

    visit(ast.parse(path.read_text()), False)
    return [(m, t) for m, t in found if m.split(".")[0] in ("sim", "simpy", "torch")]


def graph() -> dict[str, list[tuple[str, bool]]]:
    """Every module of sim with its imports."""
    return {module_name(p): imports(p) for p in sorted(SIM.rglob("*.py"))}


def test_every_package_has_a_layer_and_a_docstring() -> None:
    for init in SIM.rglob("__init__.py"):
        name = module_name(init)
        if name == "sim" or name.startswith("sim.data"):
            continue
        assert package_of(name) in LAYERS, f"{name} has no layer in LAYERS"
        doc = ast.get_docstring(ast.parse(init.read_text()))
        assert doc and "import" in doc, f"{name}: say what it owns and may import"
    for module in graph():
        assert package_of(module) in LAYERS or module.startswith("sim.data"), module


def test_runtime_imports_go_down_the_layers() -> None:
    wrong = []
    for module, deps in graph().items():
        here = package_of(module)
        for dep, type_only in deps:
            if not is_sim(dep) or type_only:
                continue
            there = package_of(dep)
            if there == here:
                continue
            if LAYERS[there] >= LAYERS[here]:
                wrong.append(f"{module} -> {dep}")
    assert wrong == []


def test_type_only_upward_references_are_the_listed_ones() -> None:
    upward = set()
    for module, deps in graph().items():
        here = package_of(module)
        for dep, type_only in deps:
            if is_sim(dep) and type_only:
                there = package_of(dep)
                if there != here and LAYERS[there] >= LAYERS[here]:
                    upward.add((here, there))
    assert upward == TYPE_ONLY_UPWARD


def test_no_import_cycle_among_modules() -> None:
    g = {m: {d for d, t in deps if not t and is_sim(d)} for m, deps in graph().items()}
    # A package's __init__ imports nothing, so an edge to a package ends there.
    state: dict[str, int] = {}
    cycle: list[str] = []

    def visit(m: str, path: list[str]) -> bool:
        state[m] = 1
        for d in sorted(g.get(m, ())):
            if d not in g:
                continue
            if state.get(d) == 1:
                stack = path + [m]
                cycle.extend(stack[stack.index(d):] + [d])
                return True
            if d not in state and visit(d, path + [m]):
                return True
        state[m] = 2
        return False

    for m in sorted(g):
        if m not in state and visit(m, []):
            break
    assert cycle == []


@pytest.mark.parametrize("package", NO_SIMPY)
def test_lower_layers_never_import_simpy_or_torch(package: str) -> None:
    bad = [(m, d) for m, deps in graph().items() if package_of(m) == package
           for d, _ in deps if d.split(".")[0] in ("simpy", "torch")]
    assert bad == []


def test_core_modules_and_functions_stay_small() -> None:
    big = []
    for package in CORE_PACKAGES:
        for path in sorted((SIM / package).glob("*.py")):
            lines = path.read_text().count("\n")
            if lines > MAX_MODULE_LINES:
                big.append(f"{path.name}: {lines} lines")
            for node in ast.walk(ast.parse(path.read_text())):
                if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                    length = (node.end_lineno or node.lineno) - node.lineno + 1
                    if length > MAX_FUNCTION_LINES:
                        big.append(f"{package}/{path.name}:{node.name}: {length} lines")
    assert big == []
