"""Public measured kernel tables, read as data: NVIDIA AIConfigurator's (Apache-2.0).

The PyPI wheel ``aiconfigurator-core`` (servesim's ``measured`` extra) ships latency
tables measured per GPU × framework × version, as parquet files under
``aiconfigurator_core/systems/data/<gpu>/<family>/<framework>/<version>/`` (families
``gemm``, ``attention``, ``comm``; latencies in milliseconds). This module finds them,
lists what exists, and reads one table into numpy columns; it never imports the
wheel's own code (only its files are used) and imports pyarrow only to read one.
A version folder may borrow a table from another version (``reuse.yaml``); that is
followed and the donor version recorded.

Every failure is one :class:`ServesimError` saying what exists: an unknown GPU,
framework or version lists the valid ones, a missing wheel names the extra to install.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import yaml

from sim.errors import ServesimError

PACKAGE = "aiconfigurator_core"
DISTRIBUTION = "aiconfigurator-core"
INSTALL_HINT = "pip install 'servesim[measured]' (aiconfigurator-core and pyarrow)"
# servesim's GPU names (sim.cost.gpus.GPUS) and the tables' folder for the same part.
GPU_DIRS: dict[str, str] = {
    "a100-80gb": "a100_sxm",
    "h100-sxm": "h100_sxm",
    "h200": "h200_sxm",
    "b200": "b200_sxm",
    "l40s": "l40s",
}
# GPUs whose profiles ship but which stay out of the roofline's fit: `servesim profile
# fit-roofline` reports the fitted roofline's error on them, GPUs it never saw.
HELD_OUT_DIRS: dict[str, str] = {"b300": "b300_sxm", "rtx-pro-6000": "rtx_pro_6000_server"}
# GPUs whose tables a profile can be built from (`servesim profile build --gpu`) that
# neither ship a profile nor enter the roofline's fit. The wheel's h100_pcie and l4
# folders are empty, so those GPUs have no tables at all.
BUILD_ONLY_DIRS: dict[str, str] = {"gb200": "gb200", "gb300": "gb300"}
FRAMEWORKS = ("vllm", "sglang", "trtllm")
# The tables' GEMM and MoE dtype for each servesim weight dtype (fp16 runs at bf16's
# tensor-core speed; nvfp4 is timed only where the GPU has FP4 tensor cores).
TABLE_DTYPES = {"bf16": "bfloat16", "fp16": "bfloat16", "fp8": "fp8", "fp8-block": "fp8_block",
                "nvfp4": "nvfp4"}


def systems_dir() -> Path:
    """The wheel's ``systems`` folder (tables under ``data/``, ``silicon_sample.csv``);
    an error naming the extra to install when the wheel is absent."""
    try:
        spec = importlib.util.find_spec(PACKAGE)
    except (ImportError, ValueError):  # a broken or blocked install: as if absent
        spec = None
    if spec is None or not spec.submodule_search_locations:
        raise ServesimError(f"the public kernel tables are not installed: {INSTALL_HINT}")
    root = Path(next(iter(spec.submodule_search_locations))) / "systems"
    if not (root / "data").is_dir():
        raise ServesimError(f"{root}: no data/ folder of kernel tables in the installed "
                            f"{DISTRIBUTION}; reinstall it: {INSTALL_HINT}")
    return root


def wheel_version() -> str:
    """The installed ``aiconfigurator-core`` version ("unknown" when it has no metadata)."""
    try:
        return importlib.metadata.version(DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        return "unknown"


def version_key(version: str) -> Any:
    """Sort key of a version string, as Python packaging orders versions (``1.3.0rc20``
    before ``1.3.0``, ``0.5.6.post2`` after ``0.5.6``); a name that is no version
    (``gpt-oss-dev``) sorts before all that are, by its text."""
    from packaging.version import InvalidVersion, Version  # ships with the measured extra

    try:
        return (1, Version(version), "")
    except InvalidVersion:
        return (0, Version("0"), version)


def gpu_dir(gpu: str) -> str:
    """The table folder of servesim GPU ``gpu``; an error listing the covered GPUs."""
    try:
        return {**GPU_DIRS, **HELD_OUT_DIRS, **BUILD_ONLY_DIRS}[gpu]
    except KeyError:
        raise ServesimError(f"no public kernel tables for gpu {gpu!r}; tables cover: "
                            f"{', '.join([*GPU_DIRS, *HELD_OUT_DIRS, *BUILD_ONLY_DIRS])}",
                            where="--gpu") from None


def versions(gpu: str, family: str, framework: str) -> list[str]:
    """Version folders of ``family`` tables for ``framework`` on ``gpu``, oldest first
    (empty when there are none)."""
    folder = systems_dir() / "data" / gpu_dir(gpu) / family / framework
    if not folder.is_dir():
        return []
    return sorted((p.name for p in folder.iterdir() if p.is_dir()), key=version_key)


def coverage() -> dict[str, dict[str, list[str]]]:
    """For each covered GPU, each framework's versions that have both GEMM and attention
    tables (what a profile can be built from)."""
    out: dict[str, dict[str, list[str]]] = {}
    for gpu in [*GPU_DIRS, *HELD_OUT_DIRS, *BUILD_ONLY_DIRS]:
        per: dict[str, list[str]] = {}
        for fw in FRAMEWORKS:
            both = sorted(set(versions(gpu, "gemm", fw)) & set(versions(gpu, "attention", fw)),
                          key=version_key)
            if both:
                per[fw] = both
        out[gpu] = per
    return out


def describe_coverage() -> str:
    """One line listing every GPU's frameworks and versions (for error messages)."""
    return "; ".join(f"{gpu}: " + ", ".join(f"{fw} {' '.join(vs)}" for fw, vs in per.items())
                     for gpu, per in coverage().items() if per)


@dataclass(frozen=True)
class Table:
    """One measured table: ``columns`` maps a column name to a numpy array (latency in
    milliseconds, as published); ``path`` is the file read and ``version`` the version
    folder it lies in (the donor's, where a folder borrows it)."""

    name: str
    path: Path
    version: str
    columns: Mapping[str, np.ndarray]

    def __len__(self) -> int:
        first = next(iter(self.columns.values()), None)
        return 0 if first is None else len(first)

    def has(self, column: str) -> bool:
        """Whether the table has ``column`` (older collections lack some)."""
        return column in self.columns

    def where(self, optional: tuple[str, ...] = (), **equal: Any) -> Table:
        """The rows whose columns equal the given values. A column named in ``optional``
        that the table lacks is no filter (older collections leave out columns that had
        one value, e.g. ``window_size`` before sliding windows were measured); any other
        missing column is an error naming the table."""
        keep = np.ones(len(self), dtype=bool)
        for col, value in equal.items():
            if col in self.columns:
                keep &= self.columns[col] == value
            elif col not in optional:
                raise ServesimError(f"the {self.name} table has no column {col!r}; its "
                                    f"columns: {', '.join(self.columns)}", source=str(self.path))
        return Table(self.name, self.path, self.version,
                     {k: v[keep] for k, v in self.columns.items()})

    def values(self, column: str) -> list[Any]:
        """The distinct values of ``column``, sorted."""
        return sorted(set(self.columns[column].tolist()))


def _read_parquet(path: Path) -> dict[str, np.ndarray]:
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ServesimError(f"reading the kernel tables needs pyarrow: {INSTALL_HINT}") from None
    try:
        data = pq.read_table(path)
    except (OSError, ValueError) as exc:
        raise ServesimError(f"cannot read the table: {exc}", source=str(path)) from None
    out: dict[str, np.ndarray] = {}
    for name in data.column_names:
        col = data.column(name).to_numpy(zero_copy_only=False)
        out[name] = col.astype(str) if col.dtype == object else col
    return out


def _donor(folder: Path, name: str) -> str | None:
    """The version a folder's ``reuse.yaml`` borrows table ``name`` from, if any."""
    reuse = folder / "reuse.yaml"
    if not reuse.is_file():
        return None
    try:
        doc = yaml.safe_load(reuse.read_text(encoding="utf-8")) or {}
    except (OSError, yaml.YAMLError) as exc:
        raise ServesimError(f"cannot read: {exc}", source=str(reuse)) from None
    items = doc.get("reuse") if isinstance(doc, dict) else None
    if not isinstance(items, list | type(None)):
        raise ServesimError(f"got {items!r}, expected a list", source=str(reuse), where="reuse")
    for item in items or []:
        if isinstance(item, dict) and item.get("table") == name:
            return str(item.get("from_version"))
    return None


def load_table(gpu: str, family: str, framework: str, version: str, name: str) -> Table:
    """Table ``name`` (e.g. ``gemm_perf``) of ``family`` for ``framework`` ``version`` on
    ``gpu``; errors list the versions that exist."""
    have = versions(gpu, family, framework)
    if version not in have:
        listed = ", ".join(have) or "none"
        raise ServesimError(f"no {family} tables for {framework} {version} on {gpu}; "
                            f"versions with them: {listed}", where="--version")
    base = systems_dir() / "data" / gpu_dir(gpu) / family / framework
    folder, source = base / version, version
    path = folder / f"{name}.parquet"
    if not path.is_file():
        donor = _donor(folder, name)
        if donor is None or not (base / donor / f"{name}.parquet").is_file():
            raise ServesimError(f"{framework} {version} on {gpu} has no {name} table",
                                source=str(folder))
        source, path = donor, base / donor / f"{name}.parquet"
    return Table(name, path, source, _read_parquet(path))
