"""Deliberate faults the test suite must catch.

Each fault names a source file, an exact snippet of it, the replacement that breaks a
rule of the simulator, the tests expected to catch it and why it matters. The checker
copies the repository to a temporary folder (the working tree is never edited), applies
one fault at a time to the copy, runs pytest on that fault's tests and reports caught
(the tests failed) or missed (they passed). It exits 1 if any fault is missed or cannot
be applied::

    python scripts/mutants.py                  # every fault
    python scripts/mutants.py -k chunked       # faults whose name contains "chunked"
    python scripts/mutants.py --list           # the faults, without running anything
    python scripts/mutants.py --against "tests/test_units.py"   # one selection for all

A snippet must occur exactly once in its file; when code moves and one no longer does,
the checker stops before running anything and names the fault, so the list is
re-pointed rather than silently skipped. Keep snippets short: one line or two.
"""

from __future__ import annotations

import argparse
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
# Left out of the copy: version control, environments, caches and outputs.
IGNORE = shutil.ignore_patterns(".git", ".venv", "__pycache__", ".pytest_cache",
                                ".mypy_cache", ".ruff_cache", ".hypothesis", "out",
                                "*.egg-info", "build", "dist", "results")


@dataclass(frozen=True)
class Fault:
    """One deliberate fault: replace ``snippet`` (exactly once in ``path``) by
    ``replacement``; ``tests`` (pytest arguments: files, ``-k`` expressions) must fail."""

    name: str
    path: str
    snippet: str
    replacement: str
    tests: tuple[str, ...]
    why: str


FAULTS: tuple[Fault, ...] = (
    Fault("chunked-admits-after-preempting", "sim/policies/chunked.py",
          "                return self.schedule(state)\n            return batch\n",
          "                return self.schedule(state)\n",
          ("tests/test_chunked_preemption.py",),
          "vLLM v1 admits nothing in an iteration that preempted: a victim would walk "
          "straight back into the space it gave up"),
    Fault("chunked-self-preemption-keeps-its-blocks", "sim/policies/chunked.py",
          "                victims.append(r)\n                state.release(r)\n"
          "                continue\n",
          "                victims.append(r)\n                continue\n",
          ("tests/test_chunked_preemption.py",),
          "the newest request that cannot grow gives up its own blocks (vLLM v1 preempts it "
          "rather than shrinking its chunk)"),
    Fault("roofline-drops-per-token-allreduce", "sim/cost/roofline.py",
          "self._ar_fixed_s + self._ar_token_s * new,", "self._ar_fixed_s,",
          ("tests/test_sharding.py",),
          "tensor parallelism all-reduces every new token's activations twice a layer"),
    Fault("watermark-never-reserved", "sim/core/cluster.py",
          "watermark = int(sv.kv_watermark * blocks)", "watermark = 0",
          ("tests/test_watermark.py",),
          "serving.watermark keeps blocks free when admitting new prefills"),
    Fault("chunked-admits-on-first-chunk", "sim/policies/chunked.py",
          "full_sequence_must_fit=self.whole)", "full_sequence_must_fit=False)",
          ("tests/test_chunked_preemption.py",),
          "vLLM from 0.19 admits a request only when its whole sequence's blocks fit"),
    Fault("chunked-caches-only-computed-blocks", "sim/core/kvpublish.py",
          "full = min(len(r.hashes), min(tokens, r.prompt) // pc.hash_tokens)", "full = 0",
          ("tests/test_prefix.py",),
          "vLLM v1 caches a prompt's full blocks as it schedules them"),
    Fault("chunked-priority-preempts-the-newest", "sim/policies/chunked.py",
          "victim = max(running, key=_rank)", "victim = running[-1]",
          ("tests/test_policies_handworked.py", "tests/test_decodeset.py"),
          "vLLM v1's priority policy preempts the lowest class, latest arrival"),
    Fault("chunked-admission-ignores-watermark", "sim/policies/chunked.py",
          "kv.allocate_slots(r, n, hit, keep_watermark=True,",
          "kv.allocate_slots(r, n, hit, keep_watermark=False,",
          ("tests/test_watermark.py",),
          "chunked admits a prompt only when the watermark stays free"),
    Fault("continuous-admission-ignores-watermark", "sim/policies/registry.py",
          "keep_watermark=True) is None:", "keep_watermark=False) is None:",
          ("tests/test_watermark.py",),
          "continuous admits a prompt only when the watermark stays free"),
    Fault("watermark-boundary-strict", "sim/core/kvmanager.py",
          "low = self.watermark if keep_watermark else 0\n",
          "low = self.watermark + 1 if keep_watermark else 0\n",
          ("tests/test_watermark.py",),
          "a request that leaves exactly the watermark free is admitted (vLLM: >=)"),
    Fault("blocks-for-off-by-one", "sim/cost/kvpages.py",
          "return -(-tokens // block_size)", "return tokens // block_size + 1",
          ("tests/test_kv_handworked.py",),
          "a prompt that fills its last block exactly needs no extra block"),
    # One preemption loop serves continuous, orca and chunked (batching.grow).
    Fault("preempts-oldest-not-newest", "sim/policies/base.py",
          "        victims.append(running.pop())\n        state.release(victims[-1])",
          "        victims.append(running.pop(running.index(r) + 1))\n"
          "        state.release(victims[-1])",
          ("tests/test_kv_handworked.py",),
          "vLLM preempts the most recently admitted request (last come, first preempted)"),
    Fault("waiting-queue-lifo", "sim/core/replica.py",
          "        else:\n            self.waiting.append(r)\n\n    @property",
          "        else:\n            self.waiting.appendleft(r)\n\n    @property",
          ("tests/test_engine_handworked.py", "tests/test_policies_handworked.py"),
          "the waiting queue is first come, first served"),
    Fault("decode-context-does-not-grow", "sim/core/decodeset.py",
          "ctx = self.ctx_base + n * self.tick", "ctx = self.ctx_base",
          ("tests/test_queueing.py",),
          "every decode adds its token to the context the next step attends to"),
    Fault("prefix-hit-ignored", "sim/core/kvmanager.py",
          "return PrefixHit(k * pc.hash_tokens, unref)", "return PrefixHit(0, unref)",
          ("tests/test_prefix.py",),
          "tokens found in the prefix cache are not prefilled again"),
    Fault("ttft-from-admission", "sim/report/metrics.py",
          '"ttft": res.first_token - arr,', '"ttft": res.first_token - res.first_sched,',
          ("tests/test_queueing.py",),
          "time to first token counts the wait in the queue (from arrival)"),
    Fault("chunked-one-seq-over-limit", "sim/policies/chunked.py",
          "seqs < self.max_seqs", "seqs <= self.max_seqs",
          ("tests/test_policies_handworked.py",),
          "max_num_seqs caps the running requests"),
    Fault("swap-time-free", "sim/core/replica.py",
          "return dt + self.swap_s if self.swap_s else dt", "return dt",
          ("tests/test_policies_handworked.py",),
          "moving KV to and from host memory over PCIe takes time in that iteration"),
    Fault("mixed-iteration-priced-as-its-decodes", "sim/core/batch.py",
          "        if not self:\n            return g.shape()",
          "        if True:\n            return g.shape()",
          ("tests/test_replica_steps.py",),
          "a chunk that shares an iteration with the decode set's members lengthens it"),
    Fault("fresh-members-gap-from-last-step", "sim/core/histogram.py",
          "buf.extend([now - r.last_token for r in fresh])",
          "buf.extend([now - since for r in fresh])",
          ("tests/test_replica_steps.py",),
          "a request that just joined the decode set waited since its own last token"),
    Fault("continuous-one-prefill-per-step", "sim/policies/registry.py",
          "                seqs += 1\n", "                seqs += 1\n                break\n",
          ("tests/test_queueing.py",),
          "every waiting prompt that fits joins the next prefill step"),
)


def check_snippets(root: Path, faults: list[Fault]) -> list[str]:
    """One line per fault whose snippet does not occur exactly once in its file."""
    problems = []
    for f in faults:
        path = root / f.path
        if not path.is_file():
            problems.append(f"{f.name}: {f.path} does not exist")
            continue
        count = path.read_text().count(f.snippet)
        if count != 1:
            problems.append(f"{f.name}: snippet {f.snippet!r} occurs {count} times "
                            f"in {f.path} (must be exactly once; re-point the fault)")
    return problems


def pytest(copy: Path, tests: tuple[str, ...], timeout_s: float) -> tuple[int | None, str]:
    """Run pytest on ``tests`` in ``copy``: (exit status or None on timeout, last lines)."""
    env = {**os.environ, "PYTHONPATH": str(copy), "PYTHONDONTWRITEBYTECODE": "1"}
    # One process (-n 0): a fault's few tests start faster than two workers would.
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-n", "0", "-p", "no:cacheprovider",
           *tests]
    try:
        proc = subprocess.run(cmd, cwd=copy, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        # A fault may stop the simulation from ever ending: a hang counts as caught only
        # by a timeout, which is reported as such.
        return None, "timed out"
    tail = [ln for ln in proc.stdout.splitlines() if ln.strip()][-1:]
    return proc.returncode, tail[0] if tail else proc.stderr.strip()[-200:]


def main(argv: list[str] | None = None) -> int:
    """Apply each selected fault to a temporary copy and report caught or missed."""
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-k", dest="select", default="",
                    help="run only faults whose name contains this")
    ap.add_argument("--list", action="store_true", help="list the faults and exit")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds one fault's tests may run (default 600)")
    ap.add_argument("--against", default=None,
                    help="pytest arguments to run for every fault instead of its own tests "
                         "(e.g. to see whether an older suite catches it)")
    ap.add_argument("--no-baseline", action="store_true",
                    help="skip checking that the selected tests pass without faults")
    args = ap.parse_args(argv)
    faults = [f for f in FAULTS if args.select in f.name]
    if args.against is not None:
        faults = [replace(f, tests=tuple(shlex.split(args.against))) for f in faults]
    if not faults:
        print(f"no fault matches {args.select!r}", file=sys.stderr)
        return 2
    if args.list:
        for f in faults:
            print(f"{f.name}: {f.path} | {' '.join(f.tests)} | {f.why}")
        return 0
    problems = check_snippets(ROOT, faults)
    if problems:
        print("faults that cannot be applied:", *problems, sep="\n  ", file=sys.stderr)
        return 1
    missed = 0
    with tempfile.TemporaryDirectory(prefix="servesim-mutants-") as tmp:
        copy = Path(tmp) / "repo"
        shutil.copytree(ROOT, copy, ignore=IGNORE)
        found = subprocess.run([sys.executable, "-c", "import sim; print(sim.__file__)"],
                               cwd=copy, env={**os.environ, "PYTHONPATH": str(copy)},
                               capture_output=True, text=True).stdout.strip()
        if not found.startswith(str(copy)):
            print(f"the copy's tests would import sim from {found!r}, not the copy",
                  file=sys.stderr)
            return 1
        if not args.no_baseline:
            every = tuple(dict.fromkeys(t for f in faults for t in f.tests))
            rc, tail = pytest(copy, every, args.timeout)
            if rc != 0:
                print(f"baseline: the selected tests fail without any fault ({tail})",
                      file=sys.stderr)
                return 1
            print(f"baseline: {' '.join(every)} pass ({tail})")
        for f in faults:
            path = copy / f.path
            original = path.read_text()
            path.write_text(original.replace(f.snippet, f.replacement, 1))
            start = time.monotonic()
            try:
                rc, tail = pytest(copy, f.tests, args.timeout)
            finally:
                path.write_text(original)
            took = time.monotonic() - start
            if rc == 1 or rc is None:
                verdict = "caught" if rc == 1 else "caught (timeout)"
            else:
                # 0: the tests passed with the fault; anything else (usage error, nothing
                # collected) proves nothing either.
                verdict = "MISSED" if rc == 0 else f"ERROR (pytest exit {rc})"
                missed += 1
            print(f"{verdict:<16} {f.name:<46} {took:5.1f}s  {' '.join(f.tests)}")
            if verdict != "caught":
                print(f"{'':16} {tail}")
    total = len(faults)
    print(f"{total - missed} of {total} faults caught")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
