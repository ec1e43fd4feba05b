"""A warning said once per key across a data loader's worker processes, which start afresh each epoch: a file
claimed in a folder of the system's temporary directory marks a key as said, in whichever process said it, and keeps
the warning's record, which the main process reads back (`records`) to list what its workers met."""

import hashlib
import itertools
import os
import shutil
import sys
import tempfile
import uuid
import weakref
from pathlib import Path


class WarnOnce:
    """`warn(key, message, record)` prints `warning: message` to stderr the first time any process sharing this
    object (a copy pickled or forked into a worker) sees `key`, and keeps `record` (one line; none: the message) for
    `records()`. The folder goes when the creating process drops it."""

    def __init__(self):
        self.folder = Path(tempfile.gettempdir()) / f"pretexts-warned-{shared_name()}"
        owner = os.getpid() if int(os.environ.get("LOCAL_RANK", "0")) == 0 else None  # one folder a node
        weakref.finalize(self, remove_if_owner, self.folder, owner)

    def __call__(self, key: str, message: str, record: str | None = None) -> None:
        if self.first(key, message if record is None else record):
            print(f"warning: {message}", file=sys.stderr, flush=True)

    def first(self, key: str, record: str = "") -> bool:
        marker = self.folder / hashlib.sha1(key.encode(errors="surrogateescape")).hexdigest()
        try:
            self.folder.mkdir(exist_ok=True)
            handle = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
        except FileExistsError:
            return False
        except OSError:  # no temporary space: saying it again beats never saying it
            return True
        try:  # one write, ended by a newline: a reader skips a record still being written
            os.write(handle, " ".join(record.splitlines()).encode(errors="surrogateescape") + b"\n")
        except OSError:
            pass
        finally:
            os.close(handle)
        return True

    def records(self) -> list[str]:
        """The records of every key said so far, by any process sharing this object (in no set order)."""
        try:
            markers = list(self.folder.iterdir())
        except OSError:  # nothing said yet (no folder)
            return []
        records = []
        for marker in markers:
            try:
                data = marker.read_bytes()
            except OSError:
                continue
            if data.endswith(b"\n") and len(data) > 1:
                records.append(data[:-1].decode(errors="surrogateescape"))
        return records


CREATED = itertools.count()  # this process's WarnOnce objects, in order: the same order on every rank


def shared_name() -> str:
    """A folder name unique to this object; under torchrun the same on every rank of the node (their parent, the
    torchrun agent, and the object's place in the order each rank creates them), so a file all ranks read (a
    held-out image) is warned about once a node, not once a rank."""
    if os.environ.get("TORCHELASTIC_RUN_ID") and int(os.environ.get("WORLD_SIZE", "1")) > 1:
        return f"agent{os.getppid()}-{next(CREATED)}"
    return uuid.uuid4().hex


def remove_if_owner(folder: Path, owner: int | None) -> None:
    """Remove `folder`, in the process that made it only (a forked worker's copy must not remove it), on each node's
    local rank 0 alone under torchrun (the node's ranks share it)."""
    if os.getpid() == owner:
        shutil.rmtree(folder, ignore_errors=True)
