"""Files in an output folder replaced by rename: a process killed at any moment leaves the old file or the new one,
never half of one, and never writes through a link; temporary files are named per process, and only a dead
process's are removed."""

import contextlib
import errno
import json
import math
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from pretexts.engine.training.processes import process_alive
from pretexts.errors import OutputError


def temporary_name(path: Path) -> Path:
    """Per process and call, so two processes never share or remove each other's temporary file."""
    return path.with_name(f".{path.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")


def remove_stale_temporaries(path: Path) -> None:
    """Temporary files of earlier killed writes of `path` (their process has ended), so they never fill the disk."""
    for stale in path.parent.glob(f".{path.name}.*.tmp"):
        pid = stale.name[len(path.name) + 2 :].split(".")[0]
        if not pid.isdigit() or int(pid) != os.getpid() and not process_alive(int(pid)):
            stale.unlink(missing_ok=True)


def replace_file(path, write: Callable, what: str = "file") -> None:
    """`write(file)` to a temporary file beside `path`, fsync, then rename over `path`.

    A process killed at any moment leaves either the old file or the new one, never half of one; a symlink
    at `path` is replaced, never written through. A failed write (full disk, no permission) raises
    OutputError and keeps the old file."""
    path = Path(path)
    tmp = temporary_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        remove_stale_temporaries(path)
        with open(tmp, "xb") as fh:  # not mkstemp: the file gets the umask's permissions, not 0600
            write(fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException as err:
        with contextlib.suppress(OSError):
            tmp.unlink(missing_ok=True)
        cause = os_error(err)
        if cause is None:
            raise
        kept = f"the previous {what} is kept" if path.is_file() else "nothing was written"
        raise OutputError(
            f"cannot write {what} '{path}': {cause.strerror or cause}; {kept}. Free some space or choose another --out."
        ) from err


def os_error(err: BaseException | None) -> OSError | None:
    """The OSError behind `err`: torch.save reports a failed write (ENOSPC, EFBIG) as a RuntimeError
    whose context is the OSError."""
    while err is not None and not isinstance(err, OSError):
        err = err.__cause__ or err.__context__
    return err


def write_text(path, text: str) -> None:
    """UTF-8; a file name that is not (Python holds its bytes as surrogates) is written escaped, as \\udcff."""
    replace_file(path, lambda fh: fh.write(text.encode("utf-8", "backslashreplace")))


def write_json(path, value) -> None:
    """JSON as every reader takes it: a non-finite number (NaN, inf) is written as null, which json's NaN is not."""
    write_text(path, json.dumps(finite_or_null(value), indent=2, default=str, allow_nan=False))


def finite_or_null(value):
    if isinstance(value, float):
        return value if math.isfinite(value) else None
    if isinstance(value, dict):
        return {key: finite_or_null(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [finite_or_null(item) for item in value]
    return value


def save_figure(fig, path) -> None:
    replace_file(path, lambda fh: fig.savefig(fh, format=Path(path).suffix.lstrip(".") or "png", dpi=100), "figure")


def open_log(path, truncate: bool = False):
    """A log file opened for appending (or from empty), line-buffered, refusing a symlink in its place."""
    flags = os.O_WRONLY | os.O_CREAT | (os.O_TRUNC if truncate else os.O_APPEND) | getattr(os, "O_NOFOLLOW", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as err:
        if err.errno == errno.ELOOP:
            raise OutputError(
                f"'{path}' is a symbolic link; pretexts never writes through a link in its output "
                f"folder. Remove the link or choose another --out."
            ) from None
        raise
    return os.fdopen(fd, "w", buffering=1, encoding="utf-8")
