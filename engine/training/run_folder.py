"""Output folders and files: a command claims its folder before writing (never over another run, never over
its own inputs), locks it while it writes, and replaces each file by a rename, never writing through a link."""

import contextlib
import json
import os
import re
import shutil
import socket
import sys
import time
from pathlib import Path

import click

from pretexts.engine.training.processes import earlier_start_of_this_job, process_alive, scheduler_job
from pretexts.errors import OutputError, ParameterError

# what a command leaves in its folder: a folder holding one of these holds a run (or an export)
RUN_FILES = (
    "checkpoint.pt",
    "log.jsonl",
    "config.json",
    "results.json",
    "finetuned.pt",
    "segmenter.pt",
    "model.safetensors",
    "pretexts.json",
    "best.pt",
)
# what else a run writes there (monitor, curve, segment's predictions, unreadable images, the loggers' files): a
# run's too, so --force removes them with it; a name no run writes is the user's and is never touched
RUN_OUTPUTS = (
    "monitor.png",
    "loss_curve.png",
    "predictions.png",
    "skipped_images.txt",
    "wandb_run_id",
    "tensorboard",
    "wandb",
)
# what a run writes before its first checkpoint: a folder holding nothing else, whose config.json names it as its
# --out, held a run that saved nothing to continue (killed in its first epoch), which the same command starts
# over, as a requeued job runs it; a logger's folder (tensorboard/, wandb/) keeps the refusal
STARTUP_FILES = {"config.json", "log.jsonl", "skipped_images.txt", "wandb_run_id"}
EPOCH_FIGURE = re.compile(r".+_epoch\d{3,}\.png")  # a method's FIGURE_NAME_epochNNN.png
SHOWN_FILES = 6  # a refusal names this many of the run's files
LOCK_FILE = ".lock"
NEW_LOCK_GRACE_S = 5.0  # a lock file this young may still be being written by its owner


def same_path(a, b) -> bool:
    return Path(a).expanduser().resolve() == Path(b).expanduser().resolve()


# click's `ctx.meta` key: the files a CLI command has read as input beyond its options (its --config file)
INPUTS_READ = "pretexts.inputs_read"
HELD_LOCK = "pretexts.held_lock"  # and the (folder, command) of the last RunLock it took


def note_input(path) -> None:
    """Record `path` as an input of the running CLI command: no output of it may replace or remove the file."""
    ctx = click.get_current_context(silent=True)
    if ctx is not None:
        ctx.meta.setdefault(INPUTS_READ, []).append(str(path))


def inputs_read() -> list[str]:
    """The files `note_input` recorded for the running CLI command (none in the Python API)."""
    ctx = click.get_current_context(silent=True)
    return list(ctx.meta.get(INPUTS_READ, ())) if ctx is not None else []


def check_not_inputs(outputs, inputs) -> None:
    """Refuse an output that is one of the command's inputs, or a folder holding one where --force would remove
    it; the command's --config file counts too (`note_input`): refused, not read first and replaced, since the
    user's file would be lost (a run's own config.json holds the new run's settings afterwards, not theirs)."""
    for out in outputs:
        for given in [*inputs, *inputs_read()]:
            if given is not None and Path(given).exists() and removed_with_run(out, given):
                raise OutputError(
                    f"--out '{out}' would overwrite this command's input '{given}'; choose another --out (out= in "
                    f"Python)."
                )


def is_run_output(name: str) -> bool:
    """Whether a run writes a file or folder of this name in its --out."""
    return name in RUN_FILES or name in RUN_OUTPUTS or EPOCH_FIGURE.fullmatch(name) is not None


def removed_with_run(out, given) -> bool:
    """Whether `given` is `out`, or lies in (or is) one of its run's files, by its own name or its target's (--force
    unlinks a link, and the target may lie in a run's folder)."""
    out, given = Path(out).expanduser().resolve(), Path(given).expanduser()
    for path in {given.resolve(), given.parent.resolve() / given.name}:
        if path == out or path.is_relative_to(out) and is_run_output(path.relative_to(out).parts[0]):
            return True
    return False


def run_files_in(folder: Path) -> list[str]:
    """What runs wrote in `folder` (links, even dangling ones, included): its RUN_FILES, then the rest."""
    folder = Path(folder)
    found = [name for name in (*RUN_FILES, *RUN_OUTPUTS) if os.path.lexists(folder / name)]
    if folder.is_dir():
        found += sorted(item.name for item in folder.iterdir() if EPOCH_FIGURE.fullmatch(item.name))
    return found


def remove_run_files(folder: Path, names) -> None:
    """Unlink each (a link too, never its target); a folder the run made (tensorboard/, wandb/) goes whole."""
    for name in names:
        path = Path(folder) / name
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        else:
            path.unlink()


def shown(names: list[str]) -> str:
    more = len(names) - SHOWN_FILES
    return ", ".join(names[:SHOWN_FILES]) + (f" and {more} more" if more > 0 else "")


def claim_output_dir(out, resume: str | None, force: bool, inputs=(), resumable: bool = True) -> None:
    """A command never writes over another run: a folder holding what a run writes needs --force (start over:
    it is all removed now, the figures and the loggers' files too; a file no run writes is kept). A folder holding
    only what a run writes before its first checkpoint (`STARTUP_FILES`: killed in its first epoch) is started
    over by the same command, with a note. `--resume` of
    the folder's own checkpoint continues in place; resuming a checkpoint from elsewhere into another --out claims
    that folder like a new run. Inputs are never removed."""
    out = Path(out)
    if resume and (resume == "auto" or same_path(Path(resume).parent, out)):
        return
    check_not_inputs([out], inputs)
    found = run_files_in(out)
    if found and not force and never_saved(out, found):
        print(
            f"note: '{out}' held a run that stopped before saving anything to continue ({shown(found)}); "
            "starting it over.",
            file=sys.stderr,
        )
    elif found and not force:
        saved = {"checkpoint.pt", "segmenter.pt"} & set(found)  # what a bare --resume continues
        hint = "continue it with --resume (resume='auto' in Python), " if resumable and not resume and saved else ""
        if resumable and not saved and set(found) & set(RUN_FILES):
            hint = "it saved no checkpoint to continue (stopped before its first one), so "
        raise OutputError(
            f"output folder '{out}' already holds a run ({shown(found)}); {hint}start it over "
            f"with --force (force=True in Python), or choose another --out."
        )
    remove_run_files(out, found)


def never_saved(out: Path, found: list[str]) -> bool:
    """`out` holds only what a run writes before its first checkpoint, its config.json a run's naming `out` (not a
    user's own config.json in a project folder)."""
    if not set(found) <= STARTUP_FILES or "config.json" not in found:
        return False
    try:
        recorded = json.loads((out / "config.json").read_text(encoding="utf-8")).get("out")
    except (OSError, ValueError, AttributeError):
        return False
    return isinstance(recorded, str) and same_path(recorded, out)


def claim_output_file(out, force: bool, inputs=(), companions=()) -> None:
    """A single output file (and the files written beside it) is never replaced silently or over an input."""
    paths = [Path(out), *map(Path, companions)]
    check_not_inputs(paths, inputs)
    check_not_run_files(paths)
    taken = [str(p) for p in paths if os.path.lexists(p)]
    if taken and not force:
        raise OutputError(
            f"{', '.join(taken)} already exist{'s' if len(taken) == 1 else ''}; replace "
            f"{'it' if len(taken) == 1 else 'them'} with --force (force=True in Python), or choose another --out."
        )


def check_not_run_files(paths) -> None:
    """A file a run keeps in its folder (its config.json, results.json, checkpoint, figures) is never replaced by
    another command's output, even with --force: the run would lose its record."""
    for path in paths:
        others = [name for name in RUN_FILES if name != path.name and os.path.lexists(path.parent / name)]
        if is_run_output(path.name) and others and os.path.lexists(path):
            raise OutputError(
                f"{path} is a file of the run in {path.parent} (beside its {others[0]}); --force does not replace a "
                f"run's own files: choose another --out (another name or folder)."
            )


FIGURE_SUFFIXES = (".png", ".jpg", ".jpeg", ".pdf", ".svg")


def figure_path(out) -> Path:
    """A figure's --out: an image file (its numbers go beside it as .json), checked before the work."""
    if Path(out).suffix.lower() not in FIGURE_SUFFIXES:
        raise ParameterError(
            f"--out '{out}' (out= in Python) must be a figure file ({', '.join(FIGURE_SUFFIXES)}); its numbers are "
            f"written beside it as .json."
        )
    return Path(out)


# ---- the lock ------------------------------------------------------------------------------------
class RunLock:
    """OUT/.lock (pid, host, command, start, scheduler job) while a command writes OUT; a second writer is refused in
    one line naming the holder. A lock left by a killed process on this host (its pid is gone) is taken over, and one
    left on another host by an earlier start of this SLURM job or torchrun run (a requeue on another node). `option`
    is how the user gave OUT (`shard` takes it as an argument)."""

    def __init__(self, folder, command: str, option: str = "--out"):
        self.path = Path(folder) / LOCK_FILE
        self.command, self.option = command, option
        self.held = False
        self.made = None  # the topmost folder this lock made (OUT or a parent): a command that fails first leaves none

    def __enter__(self) -> "RunLock":
        if self.path.parent.is_file():
            where = f"{self.option} '{self.path.parent}'"
            raise OutputError(f"{where} is a file, not a folder; choose a folder for {self.option}.")
        self.made = next((p for p in reversed([self.path.parent, *self.path.parent.parents]) if not p.exists()), None)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
        except OSError as err:
            raise self.unwritable(err) from None
        me = {
            "pid": os.getpid(),
            "host": socket.gethostname(),
            "command": self.command,
            "since": time.strftime("%Y-%m-%d %H:%M:%S"),
            "job": scheduler_job(),
        }
        for _ in range(3):
            try:
                fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY | getattr(os, "O_NOFOLLOW", 0), 0o644)
            except FileExistsError:
                holder = self.holder()
                if not self.stale(holder):
                    raise OutputError(self.held_by(holder)) from None
                with contextlib.suppress(FileNotFoundError):
                    self.path.unlink()
                print(
                    f"note: took over the lock of '{self.path.parent}' left by {describe(holder)}, which has ended.",
                    file=sys.stderr,
                )
                continue
            except OSError as err:  # a read-only folder, no permission: OUT's to fix, not its lock file's
                self.__exit__()
                raise self.unwritable(err) from None
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                json.dump(me, fh)
            self.held = True
            if ctx := click.get_current_context(silent=True):  # what the CLI's "Interrupted" line reads
                ctx.meta[HELD_LOCK] = (str(self.path.parent), self.command)
            return self
        raise OutputError(
            f"cannot lock output folder '{self.path.parent}'; another process keeps taking it. Choose another "
            f"{self.option}."
        )

    def __exit__(self, *exc) -> None:
        self.release()
        folder = self.path.parent
        while self.made is not None:  # OUT, then each parent it needed, while empty: the command wrote nothing there
            try:
                folder.rmdir()
            except OSError:
                break
            if folder == self.made:
                break
            folder = folder.parent

    def unwritable(self, err: OSError) -> OutputError:
        why, out = err.strerror or err, self.path.parent
        return OutputError(f"output folder '{out}' cannot be written: {why}; choose another {self.option}.")

    def release(self) -> None:
        if self.held and (self.holder() or {}).get("pid") == os.getpid():
            with contextlib.suppress(FileNotFoundError):
                self.path.unlink()
        self.held = False

    def holder(self) -> dict | None:
        try:
            holder = json.loads(self.path.read_text(encoding="utf-8"))
            return holder if isinstance(holder, dict) else None
        except (OSError, ValueError):
            return None

    def stale(self, holder: dict | None) -> bool:
        if holder is None:  # torn or foreign: stale unless its owner may still be writing it
            with contextlib.suppress(OSError):
                return time.time() - self.path.lstat().st_mtime > NEW_LOCK_GRACE_S
            return True
        if holder.get("host") != socket.gethostname():  # whether its process lives cannot be looked up from here
            return earlier_start_of_this_job(holder.get("job"), scheduler_job())
        pid = holder.get("pid")
        return not isinstance(pid, int) or pid == os.getpid() or not process_alive(pid)

    def held_by(self, holder: dict | None) -> str:
        return (
            f"output folder '{self.path.parent}' is being written by {describe(holder)}; wait for it to end or "
            f"choose another {self.option}. If that process is gone, delete '{self.path}'."
        )


def describe(holder: dict | None) -> str:
    if not holder:
        return "another process"
    return (
        f"`pretexts {holder.get('command')}` (pid {holder.get('pid')} on {holder.get('host')}, since "
        f"{holder.get('since')})"
    )
