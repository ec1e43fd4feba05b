"""What pretraining's checkpoints hold beyond every run's epoch state (`TrainingRun.epoch_state`), and the checks
that a checkpoint continues this run: its task's scaled parameters as they resolve now, its task and method
arguments as the task and the method read them, and the images it read."""

import dataclasses
import hashlib
import os
from pathlib import Path

import pretexts
from pretexts.engine.training.checkpoint import FORMAT_VERSION
from pretexts.errors import CheckpointError


def pretrain_entries(trainer, monitor_state: dict | None) -> dict:
    """The format and package versions, the next batch of the epoch (a stop part-way through saves it), the wall
    seconds trained so far, the monitor's state, the task's scaled parameters and the images the run reads
    (`data_images`)."""
    return {
        "format_version": FORMAT_VERSION,
        "pretexts_version": pretexts.__version__,
        "batch": trainer.batch,
        "monitor": monitor_state,
        "seconds": trainer.trained_seconds(),
        "task_sizes": task_sizes(trainer.cfg),
        "data_images": data_images(trainer.train_set, trainer.val_set),
    }


def data_images(train_set, val_set) -> dict | None:
    """A folder's record: how many training and held-out images the run reads, and a digest of its file list (the
    held-out draw and the position inside an epoch depend on that list). None for other data: shards (a stream's
    length is what is left of its epoch), CIFAR-10, synthetic images and timm datasets, which do not change."""
    digest = files_digest(train_set)
    if digest is None:
        return None
    return {"train": len(train_set), "val": len(val_set) if val_set is not None else 0, "files": digest}


def files_digest(dataset) -> str | None:
    """SHA-1 of the folder's image paths, relative to its root, in the order it reads them; computed once."""
    while dataset is not None and not hasattr(dataset, "samples"):
        dataset = getattr(dataset, "dataset", None) or getattr(dataset, "source", None)
    if dataset is None:
        return None
    if getattr(dataset, "files_digest", None) is None:
        names = "\n".join(os.path.relpath(path, dataset.root) for path, _ in dataset.samples)
        dataset.files_digest = hashlib.sha1(names.encode("utf-8", "surrogateescape")).hexdigest()
    return dataset.files_digest


def check_resumed_inputs(trainer, ckpt: dict, path: Path) -> None:
    """The task's scaled parameters (`check_task_sizes`) and the images read must be those the checkpoint's run
    had: a folder that gained or lost images moves the held-out split and the position inside the epoch."""
    check_task_sizes(trainer.cfg, ckpt, path)
    saved = recorded(ckpt, "data_images", "the images its run read", path)
    now = data_images(trainer.train_set, trainer.val_set)
    if saved is None or now is None or saved == now:  # None: data other than a folder, which does not change
        return
    counts = [f"{k} {saved[k]} -> {now[k]}" for k in ("train", "val") if saved[k] != now[k]]
    changed = ", ".join(counts) + " images" if counts else "the same counts, other files"
    raise CheckpointError(
        f"--resume: the data '{trainer.cfg.data}' changed since '{path}' was written ({changed}), which moves the "
        f"held-out split and the position inside the epoch; resume on the images it had, or start over with --force."
    )


def task_sizes(cfg) -> dict:
    """The task's scaled parameters as they resolve at the run's image size (`Pretext.sizes`)."""
    return pretexts.create_pretext(cfg.task, **cfg.task_args).sizes(cfg.img_size)


def check_task_sizes(cfg, ckpt: dict, path: Path) -> None:
    """A checkpoint's scaled task parameters must resolve as they did when it was written."""
    saved, now = recorded(ckpt, "task_sizes", "its task's scaled parameters", path), task_sizes(cfg)
    if saved != now:
        raise CheckpointError(
            f"checkpoint '{path}' was trained with the task's scaled parameters {saved}; "
            f"this version resolves them to {now} at {cfg.img_size} px, so it cannot "
            f"continue the run as it was: resume it with the pretexts version that wrote it "
            f"({ckpt.get('pretexts_version') or 'unknown'}), or start a new run with --out."
        )


def recorded(ckpt: dict, key: str, what: str, path: Path):
    """`ckpt[key]`, which every checkpoint of this format records; a checkpoint without it (written by a development
    build) is refused rather than resumed unchecked."""
    if key not in ckpt:
        raise CheckpointError(
            f"checkpoint '{path}' does not record {what} ({key}), which --resume checks, so another build of "
            f"pretexts wrote it; start a new run (another --out, or --force over this one)."
        )
    return ckpt[key]


def same_arguments(cfg, task, method):
    """`same(name, saved, asked)` for check_resumable: task and method arguments compared as the task and the
    method read them ('4' equals 4); those the method lets a resumed run change (`Method.resume_may_change`) are
    not compared."""

    def same(name: str, saved: dict, asked: dict) -> bool:
        if name == "task_args":
            return pretexts.create_pretext(cfg.task, **saved).values() == task.values()
        kind = type(method)
        before = kind.parse_args(dataclasses.replace(cfg, method_args=saved))
        return all(before[k] == v for k, v in method.args.items() if k not in kind.resume_may_change)

    return same
