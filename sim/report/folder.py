"""Output folders replaced whole, so an interrupted run never leaves a mixed one.

A command writes its outputs into a temporary sibling of its ``--out`` folder,
``<out>.tmp-<pid>`` (same parent, so the same filesystem), and as its last act moves it
into place: the previous folder, if any, is renamed to ``<out>.old-<pid>``, the new one
renamed to ``<out>``, and the old one deleted, with SIGINT and SIGTERM held back for
those few system calls. A Ctrl-C or an error before then deletes the temporary folder and
leaves the previous one as it was.

A process killed outright (SIGKILL, a power cut) cannot clean up: its ``.tmp-<pid>`` (or,
killed between the two renames, its ``.old-<pid>``) stays beside ``<out>``. The next run
writing the same ``<out>`` deletes every such sibling whose process is no longer alive;
their names say what they are, and no command reads them as results.

An existing folder is replaced only when it is empty or holds one of the outputs the
command itself writes (``marks``): a mistyped ``--out .`` must not delete a project.
Working state that later runs reuse (a sweep's ``cache/``) is named in ``carry``: it is
written in place inside ``<out>`` while the run goes on and moved into the new folder
at the swap. So is any file the run read from inside ``<out>`` (a scenario or replay
record kept beside earlier outputs): replacing the folder never deletes an input.
"""

from __future__ import annotations

import contextlib
import fnmatch
import os
import re
import shutil
import signal
import stat
from collections.abc import Iterable, Iterator
from pathlib import Path

from sim.errors import ServesimError
from sim.files import check_name_length, shown

_SIBLING = re.compile(r"\.(tmp|old)-(\d+)")


def _alive(pid: int) -> bool:
    """Whether process ``pid`` exists (one of another user's counts as alive)."""
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:  # EPERM: it exists, we may not signal it
        return True
    return True


def remove_stale(out: Path) -> list[Path]:
    """Delete ``<out>.tmp-<pid>`` and ``<out>.old-<pid>`` siblings left by processes that
    are gone (killed before they could clean up); the paths removed."""
    out = Path(out)
    removed: list[Path] = []
    try:
        siblings = list(out.parent.iterdir())
    except OSError:
        return removed
    for p in siblings:
        if not p.name.startswith(out.name):
            continue
        m = _SIBLING.fullmatch(p.name[len(out.name):])
        if m is None or int(m[2]) == os.getpid() or _alive(int(m[2])):
            continue
        shutil.rmtree(p, ignore_errors=True)
        removed.append(p)
    return removed


def inputs_inside(out: Path, inputs: Iterable[str | Path]) -> tuple[str, ...]:
    """The entries of folder ``out`` that hold one of ``inputs`` (files the command
    read: a scenario, a replay record kept beside earlier outputs): carried into the new
    folder, so that replacing ``out`` never deletes what the run was given."""
    root = Path(out).resolve()
    names: list[str] = []
    for p in inputs:
        try:
            rel = Path(p).resolve().relative_to(root)
        except (ValueError, OSError):
            continue
        if rel.parts:
            names.append(rel.parts[0])
    return tuple(dict.fromkeys(names))


def check_replaceable(out: Path, marks: tuple[str, ...],
                      inputs: Iterable[str | Path] = (), alone: tuple[str, ...] = ()) -> None:
    """Refuse (one line naming ``--out``) to replace ``out`` when it is a file, or a
    folder holding something other than the run's ``inputs`` but none of ``marks``
    (names or glob patterns of the command's own outputs). ``alone``: entries that make
    the folder the command's only when nothing else is there (a cache that an
    interrupted run left, and that another command's folder may hold too)."""
    out = Path(out)
    check_name_length(out, f"--out {shown(out)}")
    try:
        mode = out.stat().st_mode
    except FileNotFoundError:
        return
    except NotADirectoryError:
        raise ServesimError("a folder on its path is a file", where=f"--out {out}") from None
    except OSError as exc:  # a name longer than the file system takes, a loop of links
        raise ServesimError(f"cannot be used as a folder: {exc.strerror}",
                            where=f"--out {out}") from None
    if not stat.S_ISDIR(mode):
        raise ServesimError("exists and is not a folder", where=f"--out {out}")
    try:
        names = [p.name for p in out.iterdir()]
    except OSError as exc:
        raise ServesimError(f"cannot read the folder: {exc.strerror}",
                            where=f"--out {out}") from None
    names = [n for n in names if n not in inputs_inside(out, inputs)]
    if names and not any(fnmatch.fnmatchcase(n, m) for n in names for m in marks) \
            and not all(n in alone for n in names):
        raise ServesimError(f"holds none of this command's outputs ({', '.join(marks)}) and "
                            "would be replaced whole; give a new or empty folder",
                            where=f"--out {out}")


@contextlib.contextmanager
def signals_held() -> Iterator[None]:
    """SIGINT and SIGTERM wait (stay pending) until the block ends; a no-op where
    signal masks do not exist."""
    if not hasattr(signal, "pthread_sigmask"):
        yield
        return
    held = {signal.SIGINT, signal.SIGTERM}
    before = signal.pthread_sigmask(signal.SIG_BLOCK, held)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


def _fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _swap(stage: Path, out: Path, carry: tuple[str, ...]) -> None:
    """Move ``carry`` entries of the old ``out`` into ``stage``, then ``stage`` to
    ``out``, deleting the old folder; undone on failure."""
    old = out.with_name(f"{out.name}.old-{os.getpid()}")
    with signals_held():
        moved: list[str] = []
        had = out.exists()
        try:
            if had:
                for name in carry:
                    if (out / name).exists() and not (stage / name).exists():
                        os.rename(out / name, stage / name)
                        moved.append(name)
                os.rename(out, old)
            os.rename(stage, out)
        except BaseException:
            if had and old.exists() and not out.exists():
                os.rename(old, out)
            for name in moved:
                if out.exists() and (stage / name).exists():
                    os.rename(stage / name, out / name)
            raise
        _fsync_dir(out.parent)
        if had:
            shutil.rmtree(old, ignore_errors=True)


@contextlib.contextmanager
def replaced_folder(out: Path, marks: tuple[str, ...], carry: tuple[str, ...] = (),
                    inputs: Iterable[str | Path] = (),
                    salvage: str | None = None) -> Iterator[Path]:
    """Yield a new, empty temporary sibling of ``out`` to write into; when the block
    ends normally, it replaces ``out`` whole (``carry`` entries of the old folder, and
    those holding one of the run's ``inputs``, moved across unless the new folder has
    one of that name). On any exception it is deleted and ``out`` left as it was — unless
    ``salvage`` is set and a KeyboardInterrupt stopped a block that had written
    something: the folder is then kept as ``<out><salvage>`` (replacing an older one).
    OSErrors become one-line :class:`ServesimError` naming ``--out``."""
    given = Path(out)
    inputs = list(inputs)
    check_replaceable(given, marks, inputs, carry)
    out = given.resolve()
    if out.parent == out:
        raise ServesimError("cannot replace a filesystem root", where=f"--out {given}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        remove_stale(out)
        stage = out.with_name(f"{out.name}.tmp-{os.getpid()}")
        shutil.rmtree(stage, ignore_errors=True)  # our own pid's, from a process long gone
    except OSError as exc:
        raise ServesimError(f"cannot write outputs: {exc.strerror}",
                            where=f"--out {given}") from None
    try:
        # Made inside the block whose handlers delete it: an interrupt just after the
        # mkdir must not leave it behind.
        stage.mkdir()
        yield stage
        given_inside = inputs_inside(out, inputs)
        clash = [name for name in given_inside if (stage / name).exists()]
        if clash:
            # Replacing it would lose a file the run was given (a trace named requests.csv).
            raise ServesimError(f"holds {clash[0]}, which this run read, and an output of "
                                "that name would replace it; give another --out, or move "
                                "the input", where=f"--out {given}")
        _swap(stage, out, (*carry, *given_inside))
    except OSError as exc:
        with signals_held():
            shutil.rmtree(stage, ignore_errors=True)
        raise ServesimError(f"cannot write outputs: {exc.strerror}",
                            where=f"--out {given}") from None
    except KeyboardInterrupt:
        with signals_held():
            if salvage and stage.exists() and any(stage.iterdir()):
                kept = out.with_name(f"{out.name}{salvage}")
                shutil.rmtree(kept, ignore_errors=True)
                os.rename(stage, kept)
            else:
                shutil.rmtree(stage, ignore_errors=True)
        raise
    except BaseException:
        with signals_held():
            shutil.rmtree(stage, ignore_errors=True)
        raise
