"""Reading the user's input files, with one clear line for every way a file can be wrong.

Scenario files, traces, cost profiles, HuggingFace ``config.json`` files, measurement
files and priors all come through here. A missing file, a folder where a file belongs, a
file we may not read, an empty file, a compressed file, binary content and text that is
not UTF-8 each raise :class:`ServesimError` naming the file and what to do, instead of
the ``UnicodeDecodeError`` or ``IsADirectoryError`` Python would show.

File names on their way out too: :func:`shown` writes a name's non-UTF-8 bytes so that
any output holds it, :func:`check_name_length` refuses an output name the file system
would refuse only once the run is done, and :func:`check_replaceable_file` keeps a
command from writing over a file it did not make.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path

from sim.errors import ServesimError

# Leading bytes of the compressed formats users meet, and the command that undoes each.
COMPRESSED: tuple[tuple[bytes, str, str], ...] = (
    (b"\x1f\x8b", "gzip", "gunzip"),
    (b"\x28\xb5\x2f\xfd", "zstd", "unzstd"),
    (b"BZh", "bzip2", "bunzip2"),
    (b"\xfd7zXZ\x00", "xz", "unxz"),
    (b"PK\x03\x04", "zip", "unzip"),
)
_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")


def compression_of(head: bytes) -> tuple[str, str] | None:
    """(format, command to decompress) when ``head`` (a file's first bytes) starts like a
    compressed file, else None."""
    for magic, name, tool in COMPRESSED:
        if head.startswith(magic):
            return name, tool
    return None


def check_readable(path: Path, what: str) -> None:
    """Raise a one-line error unless ``path`` is an existing file this process may open;
    ``what`` names the kind of file in the message (``scenario``, ``trace``)."""
    src = str(path)
    if not path.exists():
        raise ServesimError(f"no such {what} file (cannot read it)", src)
    if path.is_dir():
        raise ServesimError(f"is a directory, expected a {what} file", src)
    mode = path.stat().st_mode
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) or stat.S_ISSOCK(mode):
        # /dev/zero and the like never end: reading one would fill memory. Pipes are
        # files here (a shell's <(...) or /dev/stdin from a pipe).
        raise ServesimError(f"is a device or socket, not a {what} file", src)
    try:
        with open(path, "rb"):
            pass
    except OSError as exc:
        raise ServesimError(f"cannot read {what} file: {exc.strerror}", src) from None


def decode(data: bytes, src: str, what: str, partial: bool = False) -> str:
    """``data`` (a whole file's bytes, or its first ones when ``partial``) as text; errors
    name ``src`` and say what is wrong: empty, compressed, UTF-16, binary, or not UTF-8 at
    a byte offset. A UTF-8 byte-order mark is dropped."""
    if not data.strip():
        raise ServesimError(f"the {what} file is empty", src)
    packed = compression_of(data[:8])
    if packed is not None:
        name, tool = packed
        raise ServesimError(f"a {name}-compressed file, expected {what} text; decompress it "
                            f"first ({tool} {src})", src)
    if data.startswith(_UTF16_BOMS):
        raise ServesimError(f"UTF-16 text, expected UTF-8; save the {what} file as UTF-8", src)
    if b"\x00" in data[:4096]:
        raise ServesimError(f"binary content (NUL bytes), expected a {what} text file", src)
    try:
        return data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        if partial and exc.start >= len(data) - 3 and exc.end == len(data):
            # A character cut by the end of the bytes read, not a bad one.
            return data[:exc.start].decode("utf-8-sig")
        line = data[:exc.start].count(b"\n") + 1
        raise ServesimError(f"not UTF-8 text: byte 0x{data[exc.start]:02x} at offset "
                            f"{exc.start}; save the {what} file as UTF-8", src,
                            f"line {line}") from None


def read_text(path: str | Path, what: str) -> str:
    """The whole UTF-8 text of the file at ``path``; every failure is one line naming it."""
    p = Path(path)
    check_readable(p, what)
    try:
        data = p.read_bytes()
    except OSError as exc:
        raise ServesimError(f"cannot read {what} file: {exc.strerror}", str(p)) from None
    return decode(data, str(p), what)


def sniff_head(path: Path, what: str, n: int = 8) -> bytes:
    """The first ``n`` bytes of a readable file (checked as :func:`check_readable`)."""
    check_readable(path, what)
    try:
        with open(path, "rb") as fh:
            return fh.read(n)
    except OSError as exc:
        raise ServesimError(f"cannot read {what} file: {exc.strerror}", str(path)) from None


def too_deep(src: str, what: str) -> ServesimError:
    """The error for a ``what`` file at ``src`` whose lists or mappings nest deeper than
    the parser can follow (Python's recursion limit, about 1,000 levels)."""
    return ServesimError(f"nested too deeply to read (lists or mappings about 1,000 levels "
                         f"deep); no {what} file needs more than a few levels", src)


def check_replaceable_file(path: Path, ours: Callable[[Path], bool], what: str,
                           where: str = "--out") -> None:
    """Refuse (one line naming ``where`` and the file) to write over an existing ``path``
    that ``ours`` does not recognise as a file of the kind the command writes; ``what``
    names that kind (``a profile calibrate wrote``). A command replaces its own earlier
    output, as the folder-writing commands replace a folder of their own outputs, and
    nothing else: a scenario or trace given as ``--out`` by mistake is kept."""
    if not path.exists():
        return
    if path.is_dir():
        raise ServesimError(f"got {str(path)!r}, a folder; expected a file name", where=where)
    if not ours(path):
        raise ServesimError(f"got {str(path)!r}, which exists and is not {what}; it is "
                            "replaced only when it is: give a new file name or move that "
                            "file away", where=where)


def shown(path: str | Path) -> str:
    """``path`` as text every output can hold (UTF-8 JSON, a report, a plot's title):
    bytes of a file name that are not UTF-8, which Python keeps as lone surrogates, are
    written as ``\\xNN`` escapes (``sc\\xff.yaml``); a name that is UTF-8 comes back as
    it is."""
    text = os.fspath(path)
    try:
        return text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    except UnicodeEncodeError:  # a surrogate no file-name byte stands for
        return text.encode("utf-8", "backslashreplace").decode("utf-8")


# File systems' longest name (bytes; NAME_MAX on Linux and macOS), and what the commands
# add to an output's name for the temporary file or folder they write first (".tmp-<pid>"
# with room for a 10-digit pid; ".NAME.tmp").
NAME_MAX = 255
TEMP_BYTES = 15


def check_name_length(path: Path, where: str) -> None:
    """Refuse, in one line naming ``where`` (``--out``), an output ``path`` one of whose
    names is longer than a file system takes once the command's temporary name is built
    from it: found before the run rather than when its outputs are written."""
    for i, part in enumerate(path.parts):
        most = NAME_MAX - (TEMP_BYTES if i == len(path.parts) - 1 else 0)
        size = len(part.encode("utf-8", "surrogateescape"))
        if size > most:
            raise ServesimError(f"a name of {size} bytes ({shown(part[:40])}...) in the path; "
                                f"file systems take {NAME_MAX} bytes a name, and the last one "
                                f"here at most {NAME_MAX - TEMP_BYTES} (the run writes a "
                                "temporary name beside it first)", where=where)
