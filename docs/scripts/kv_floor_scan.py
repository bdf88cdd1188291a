"""Where the decode-attention KV-read floor binds (docs/measured-profiles.md, "Decode
attention"): every shipped profile's decode grid against its floor.

Re-run from the repository root:  .venv/bin/python docs/scripts/kv_floor_scan.py
For every shipped profile with a floor (sim.cost.profilecost.kv_read_floor), at 1, 4, 16,
64 and 256 sequences of 129, 1,025, 4,097 and 16,385 tokens each, it compares the grid's
time (every layer) with the floor's, and prints per GPU the points where the floor is the
larger and the largest ratio of the two.
"""

from __future__ import annotations

from pathlib import Path

from sim.cost.profilefile import load_profile

PROFILES = Path(__file__).resolve().parents[2] / "sim" / "data" / "profiles"
SEQS = (1, 4, 16, 64, 256)
TOKENS = (129, 1025, 4097, 16385)


def main() -> None:
    """Print each GPU's binding points and worst ratio."""
    total: dict[str, int] = {}
    binds: dict[str, int] = {}
    worst: dict[str, tuple[float, str]] = {}
    for path in sorted(PROFILES.glob("*.yaml")):
        cost = load_profile(str(path))
        grid = cost.grids.get("decode_attention")
        if grid is None or not cost.kv_floor:
            continue
        gpu = cost.device
        for b in SEQS:
            for c in TOKENS:
                t = grid.at(b, c) * cost.model.layers
                floor = b * c * cost.kv_floor
                total[gpu] = total.get(gpu, 0) + 1
                if floor > t:
                    binds[gpu] = binds.get(gpu, 0) + 1
                    if floor / t > worst.get(gpu, (0.0, ""))[0]:
                        worst[gpu] = (floor / t, f"{path.stem} at {b} x {c}")
    for gpu in sorted(total):
        ratio, where = worst.get(gpu, (0.0, "-"))
        print(f"{gpu}: {binds.get(gpu, 0)} of {total[gpu]} points bind; largest "
              f"floor / grid {ratio:.2f} ({where})")


if __name__ == "__main__":
    main()
