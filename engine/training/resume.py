"""What pretraining and fine-tuning share to resume a run: the training state in a checkpoint and its log."""

import json
import math
from pathlib import Path

from pretexts.engine.training.checkpoint import check_shapes, load_checkpoint, rng_states, set_rng_states
from pretexts.engine.training.file_writes import write_text
from pretexts.engine.training.run_folder import never_saved, run_files_in, same_path
from pretexts.errors import CheckpointError


def training_state(model, optimizer, scheduler, scaler) -> dict:
    """The checkpoint entries that make a resumed run continue as if never stopped."""
    return {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scheduler": scheduler.state_dict(),
        "scaler": scaler.state_dict(),
        "rng": rng_states(),
    }


def checkpoint_to_resume(path: Path, auto: bool, out: Path, kind: str = "pretrain") -> dict:
    """The checkpoint `--resume` names, of `kind`; with a bare --resume (`auto`), OUT/checkpoint.pt, which must exist.
    It stays on the CPU (where it is verified, and where the RNG states belong): load_state_dict moves the rest."""
    if auto and not path.is_file():
        found = run_files_in(out)
        again = (
            "drop --resume to start it over (it stopped before its first checkpoint)"
            if found and never_saved(Path(out), found)
            else "drop --resume and start it over with --force"
            if found
            else "start without --resume"
        )
        raise CheckpointError(
            f"--resume: there is no checkpoint in '{out}' to continue; {again}, or give --resume PATH."
        )
    return load_checkpoint(path, kinds=(kind,))


def restore_training_state(ckpt: dict, path: Path, epochs: int, model, optimizer, scheduler, scaler) -> None:
    """Load `training_state`'s entries, after checking that the run asks for no fewer epochs than were done."""
    if ckpt["epoch"] > epochs:
        raise CheckpointError(
            f"checkpoint '{path}' has done {ckpt['epoch']} epochs, more than the "
            f"{epochs} asked; raise --epochs to continue it."
        )
    check_shapes(model, ckpt["model"], path, "resume with the settings it was trained with.")
    check_parameter_groups(ckpt["optimizer"], optimizer, path)
    try:
        model.load_state_dict(ckpt["model"])
        optimizer.load_state_dict(ckpt["optimizer"])
    except (RuntimeError, ValueError, KeyError) as err:
        raise CheckpointError(
            f"checkpoint '{path}' does not fit this model ({' '.join(str(err).split())[:300]}); "
            f"resume with the settings it was trained with."
        ) from None
    scheduler.step_update(num_updates=ckpt["global_step"])  # re-planned, so --epochs may grow
    scaler.load_state_dict(ckpt["scaler"])
    set_rng_states(ckpt["rng"])


def check_parameter_groups(saved: dict, optimizer, path: Path) -> None:
    """The checkpoint's optimizer groups the parameters as this run's does. The settings were already checked
    equal, so groups that differ come from another version of pretexts: resuming with other settings cannot help,
    and the weights still load where weights alone are wanted."""
    before = [len(group["params"]) for group in saved.get("param_groups", [])]
    now = [len(group["params"]) for group in optimizer.param_groups]
    if before != now:
        raise CheckpointError(
            f"checkpoint '{path}' groups its optimizer's parameters as {before}, this version of pretexts as {now} "
            f"with the same settings, so its optimizer state cannot continue here; start the run over with --force, "
            f"or use its weights as they are (finetune, probe and export load them)."
        )


def check_continues(ckpt: dict, path: Path, epochs: int, out: Path) -> None:
    """A checkpoint resumed into another folder than its own must have epochs left to train: one that has done all
    `epochs` would train nothing there and leave no checkpoint (in its own folder, such a resume is a no-op, so a
    requeued cluster job that finds its run finished ends well)."""
    if ckpt["epoch"] >= epochs and not same_path(path.parent, out):
        raise CheckpointError(
            f"checkpoint '{path}' has done all {epochs} epochs asked, so resuming it into '{out}' would train "
            f"nothing and write no checkpoint there; raise --epochs (e.g. --epochs {epochs + 1}) to continue it."
        )


def truncate_log(log: Path, step: int) -> None:
    """Drop log lines of steps done after a checkpoint; the resumed run writes them again."""
    if log.exists():
        lines = [line for line in log.read_text(encoding="utf-8").splitlines() if logged_step(line) <= step]
        write_text(log, "".join(line + "\n" for line in lines))  # by rename: a link in its place is replaced


def logged_step(line: str) -> float:
    """The step of a log line; a line torn by a crash (a full disk) counts as after every checkpoint."""
    try:
        return json.loads(line)["step"]
    except (ValueError, KeyError, TypeError):
        return math.inf
