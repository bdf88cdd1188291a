"""Fingerprint what every shipped scenario writes under every batching policy.

Used to show that a refactor changes no result: run it on two commits and compare the
two files it writes. It drives only the command line (``servesim simulate``), so it
runs unchanged on any commit that has one::

    python scripts/same_outputs.py --out before.json          # on the old commit
    python scripts/same_outputs.py --out after.json --against before.json

Each case is one scenario with one policy override (and a few serving variants that
reach code the shipped files leave idle: a non-zero watermark, swap preemption, a
small KV cache). A case records the SHA-256 of its ``requests.csv`` and
``summary.json``, or the one-line error the command printed (a policy a scenario
cannot take is an expected error, and must stay the same error).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
POLICIES = ("static", "continuous", "orca", "chunked")
# Variants that exercise the watermark, swapping and preemption under load.
VARIANTS: dict[str, tuple[str, ...]] = {
    "": (),
    "watermark-small-kv": ("serving.watermark=0.1", "serving.num_kv_blocks=600"),
    "swap-small-kv": ("serving.preemption=swap", "serving.num_kv_blocks=600"),
    "recompute-small-kv": ("serving.num_kv_blocks=600",),
}


def cases() -> list[tuple[str, tuple[str, ...]]]:
    """(case name, ``--set`` overrides) for every scenario, policy and variant."""
    out = []
    for path in sorted((ROOT / "scenarios").glob("*.yaml")):
        if "disaggregated" in path.name:
            out.append((path.name, ()))
            continue
        for policy in POLICIES:
            for vname, extra in VARIANTS.items():
                name = f"{path.name} policy={policy}" + (f" {vname}" if vname else "")
                out.append((name, (f"serving.policy={policy}", *extra)))
    return out


def run_case(scenario: str, sets: tuple[str, ...], work: Path) -> dict[str, str]:
    """Run one case in a fresh folder; the hashes of its outputs, or its error line."""
    folder = work / hashlib.sha256(" ".join((scenario, *sets)).encode()).hexdigest()[:16]
    cmd = [sys.executable, "-m", "sim.cli", "simulate", str(ROOT / "scenarios" / scenario),
           "--no-plots", "--quiet", "--out", str(folder)]
    for s in sets:
        cmd += ["--set", s]
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        # The last line is the one-line error; paths relative to the checkout, so that two
        # checkouts in different folders compare equal.
        last = (proc.stderr.strip().splitlines() or [""])[-1]
        return {"rc": str(proc.returncode), "error": last.replace(f"{ROOT}/", "")}
    return {name: hashlib.sha256((folder / name).read_bytes()).hexdigest()
            for name in ("requests.csv", "summary.json") if (folder / name).exists()}


def main(argv: list[str] | None = None) -> int:
    """Write the fingerprints; with ``--against``, list the cases that differ."""
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", required=True, help="JSON file to write")
    ap.add_argument("--against", help="JSON file from another commit to compare with")
    ap.add_argument("-k", default="", help="only cases whose name contains this")
    args = ap.parse_args(argv)
    result: dict[str, dict[str, str]] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, sets in cases():
            if args.k not in name:
                continue
            result[name] = run_case(name.split()[0], sets, Path(tmp))
            print(f"{name}: {'error' if 'error' in result[name] else 'ok'}", flush=True)
    Path(args.out).write_text(json.dumps(result, indent=1, sort_keys=True) + "\n")
    if not args.against:
        return 0
    before = json.loads(Path(args.against).read_text())
    differ = [n for n in result if before.get(n) != result[n]]
    for n in differ:
        print(f"DIFFERS: {n}\n  before {before.get(n)}\n  after  {result[n]}")
    print(f"{len(result) - len(differ)} of {len(result)} cases identical")
    return 1 if differ else 0


if __name__ == "__main__":
    sys.exit(main())
