"""What every resumable training command shares (`Pretrainer`, `Finetuner`, `Segmentation`): its ranks and device,
the epoch's steps, the lr schedule, precision and the guarded optimiser step, stop signals, progress lines, the
epoch checkpoint and its resume, and the run folder it holds while it trains (locked, claimed, resumed). Each
command builds its own data, model and optimiser between these calls, in this order:

    begin(cfg, accum_iter) -> plan_epochs(train_set) -> schedule(optimizer, lr_min, total) (or a schedule of its
    own) -> guard_steps(...) -> progress_lines(...)
    with self.run_folder(command, inputs): ...     # load(path) -> resume_epochs(...); save -> epoch_state(kind)

Each epoch's checkpoint and the run's end add to OUT/skipped_images.txt the images that failed only when decoded.
"""

from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from timm.scheduler import CosineLRScheduler

from pretexts.engine.data.image_check import list_decode_failures
from pretexts.engine.data.loader import EpochSampler
from pretexts.engine.data.streams import ImageStream
from pretexts.engine.training import distributed
from pretexts.engine.training.arithmetic import arithmetic, resumed_arithmetic_note, use_cuda_arithmetic
from pretexts.engine.training.file_writes import write_text
from pretexts.engine.training.interrupt import StopSignals
from pretexts.engine.training.nonfinite import NonFiniteGuard
from pretexts.engine.training.optimizer_step import OptimizerStep
from pretexts.engine.training.precision import amp_dtype, grad_scaler, precision_name
from pretexts.engine.training.preflight import resolve_device
from pretexts.engine.training.progress import ProgressLines
from pretexts.engine.training.resume import (
    checkpoint_to_resume,
    restore_training_state,
    training_state,
    truncate_log,
)
from pretexts.engine.training.resume_config import check_resumable
from pretexts.engine.training.run_folder import RunLock, claim_output_dir
from pretexts.engine.training.start_checks import check_batchnorm_batch, refuse_unused_task_args


class TrainingRun:
    """The shared state: cfg, rank, world, device, out; sampler, steps_per_epoch, epochs; scheduler; dtype, scaler,
    nonfinite, optimizer_step, stop; lines; epoch, global_step, history. A subclass gives `load(path)`, and names
    the file `--resume` continues from (`resume_file`)."""

    resume_file = "checkpoint.pt"

    def begin(self, cfg, accum_iter: int = 1) -> None:
        """The ranks (torchrun) and the device with its arithmetic (the batch must split into ranks x
        `accum_iter` micro-batches); the seed set for what is built next. Task arguments for a method that uses no
        task are refused first."""
        self.cfg = cfg
        refuse_unused_task_args(cfg)  # pretraining's: before the unused task is built from them
        self.rank, self.world, self.device = distributed.setup(resolve_device(cfg.device), cfg.batch_size, accum_iter)
        self.accum_iter = accum_iter
        self.finished_note: str | None = None  # set by a resume of a run with no epochs left
        self.logged_step: int | None = None  # a resume's log is cut back to this step (None: the checkpoint's)
        use_cuda_arithmetic(self.device, cfg.tf32, cfg.cudnn_benchmark)
        self.out = Path(cfg.out)
        self.epoch, self.global_step, self.history = 0, 0, []
        torch.manual_seed(cfg.seed)

    def plan_epochs(self, train_set) -> int:
        """The sampler of this rank's share (a stream orders itself: its position, like the sampler's, is
        (epoch, start)), the optimiser steps of an epoch, and of the run (returned)."""
        cfg = self.cfg
        streamed = isinstance(train_set, ImageStream)
        self.sampler = train_set if streamed else EpochSampler(train_set, self.world, self.rank, seed=cfg.seed)
        self.steps_per_epoch = len(self.sampler) // (cfg.batch_size // self.world)
        if cfg.max_steps_per_epoch:
            self.steps_per_epoch = min(self.steps_per_epoch, cfg.max_steps_per_epoch)
        self.epochs = cfg.epochs
        return cfg.epochs * self.steps_per_epoch

    def schedule(self, optimizer: torch.optim.Optimizer, lr_min: float, total: int) -> None:
        """timm's per-step cosine to `lr_min` over `total` steps, the warm-up epochs included (at least one step of
        cosine). timm sets each group's lr x its layer scale on construction, warm-up or not."""
        self.optimizer = optimizer
        # timm's convention (warmup_prefix=False, as timm's train script): the cosine spans the warm-up too, so after
        # it the lr starts at the cosine's value there (97 % of the peak for 10 of 90 epochs), not at the peak
        self.scheduler = CosineLRScheduler(
            optimizer,
            t_initial=max(total, 2),  # timm warns that a one-step cosine does nothing; the one step's lr is the peak
            lr_min=lr_min,
            t_in_epochs=False,
            warmup_t=min(int(self.cfg.warmup_epochs * self.steps_per_epoch), total - 1),
        )

    def guard_steps(self, model: torch.nn.Module, img_size: int, forward=None) -> None:
        """Autocast's dtype, the loss scaler, the non-finite guard and the optimiser step they make up; the stop
        signals the loop checks between steps. First, before OUT is touched: a batch too small for the model's
        trained BatchNorm layers is refused."""
        cfg = self.cfg
        owner = getattr(self, "backbone_name", None) or getattr(cfg, "backbone", None)
        check_batchnorm_batch(model, cfg.batch_size, self.world, self.accum_iter, owner, img_size, self.device, forward)
        self.dtype = amp_dtype(cfg.amp, self.device)
        self.scaler = grad_scaler(self.device, self.dtype)
        self.nonfinite = NonFiniteGuard(cfg.skip_nonfinite, self.out, checkpoint=self.resume_file)
        self.optimizer_step = OptimizerStep(
            model, self.optimizer, self.scheduler, self.scaler, self.nonfinite, cfg.clip_grad, self.world
        )
        self.stop = StopSignals()

    def progress_lines(self, total: int, **options) -> None:
        """The run's progress lines (rank 0 alone; none under --quiet)."""
        cfg = self.cfg
        self.lines = ProgressLines(
            self.epochs, total, quiet=cfg.quiet, enabled=self.rank == 0, every=cfg.log_every, **options
        )

    def interrupted(self) -> dict:
        """The results of a run stopped by a signal: which, its exit code, the epochs and steps done."""
        return {
            "interrupted": self.stop.signal.name,
            "exit_code": self.stop.exit_code,
            "epochs": self.epoch,
            "optimizer_steps": self.global_step,
        }

    def epoch_state(self, kind: str | None, record=None) -> dict:
        """An epoch's checkpoint entries for `--resume`: the kind (none for pretraining's), the run's record (the
        config unless given), model, optimiser, schedule, scaler and random states, the epoch, step and history,
        the skipped steps and the arithmetic. Rank 0 saves it, after each epoch: the images found unreadable as they
        were decoded since are then listed in OUT/skipped_images.txt."""
        self.list_decode_failures()
        return {
            **({"kind": kind} if kind else {}),
            "config": (record or self.cfg).to_dict(),
            **training_state(self.model, self.optimizer, self.scheduler, self.scaler),
            "epoch": self.epoch,
            "global_step": self.global_step,
            "history": packed_history(self.history),
            "nonfinite_skipped": self.nonfinite.skipped,
            "arithmetic": arithmetic(self.device, self.world, precision_name(self.dtype)),
        }

    def resume_epochs(self, path: Path, kind: str, may_change: frozenset, same=None, check=None, resolved=None) -> dict:
        """Continue from the `epoch_state` checkpoint at `path` (returned): refused in one line if it is of another
        kind or would change the run (`same` and `check(ckpt)` add a command's own comparisons; `resolved`, the
        config with its `auto` values resolved as the checkpoint records them, is what is compared); a resume on
        other arithmetic is told so (`echo`)."""
        ckpt = checkpoint_to_resume(path, self.cfg.resume == "auto", self.out, kind=kind)
        check_resumable(ckpt["config"], resolved or self.cfg, may_change, path, same)
        if check:
            check(ckpt)
        restore_training_state(ckpt, path, self.epochs, self.model, self.optimizer, self.scheduler, self.scaler)
        self.epoch, self.global_step = ckpt["epoch"], ckpt["global_step"]
        self.history = unpacked_history(ckpt.get("history", []))
        self.nonfinite.skipped = ckpt.get("nonfinite_skipped", 0)
        note = resumed_arithmetic_note(
            ckpt.get("arithmetic"), arithmetic(self.device, self.world, precision_name(self.dtype)), path
        )
        if note and self.rank == 0:
            self.echo(note)
        if self.epoch >= self.epochs:  # a requeued job of a finished run ends well; a user is told, once it goes on
            longer = "--max-steps" if getattr(self.cfg, "max_steps", None) else "--epochs"  # what plans its length
            self.finished_note = (
                f"'{path}' has done all {self.epochs} epochs asked: nothing is left to train, only the end-of-run "
                f"outputs are written again; raise {longer} to train on."
            )
        return ckpt

    @contextmanager
    def run_folder(self, command: str, inputs: list):
        """While the run trains: a lost rank is reported, rank 0 holds the folder's lock, a resume loads its
        checkpoint, then rank 0 claims the folder (refusing another run's unless --force) and cuts the log back to
        the checkpoint's step (only now that the folder is this run's: a refused resume cuts no other run's log) and
        says when the checkpoint has no epochs left to train."""
        cfg = self.cfg
        with (
            distributed.lost_rank_reported(self.world, self.rank, self.out),
            RunLock(self.out, command) if self.rank == 0 else nullcontext(),  # rank 0 alone writes
        ):
            if cfg.resume:
                self.load(self.out / self.resume_file if cfg.resume == "auto" else Path(cfg.resume))
            if self.rank == 0:
                claim_output_dir(self.out, cfg.resume, cfg.force, inputs=[*inputs, cfg.resume])
                if cfg.resume:
                    truncate_log(
                        self.out / "log.jsonl", self.global_step if self.logged_step is None else self.logged_step
                    )
                if self.finished_note:  # only now: a command's own checks may refuse the resume
                    self.echo(self.finished_note)
            try:
                yield
            finally:  # the run's last images (held-out ones included, from a folder or shards), however it ends
                if self.rank == 0:
                    self.list_decode_failures()

    def list_decode_failures(self) -> None:
        """OUT/skipped_images.txt brought up to date with the training and held-out images that the start-up scan
        passed but that failed when decoded (`image_check.list_decode_failures`); a command's start listed the rest."""
        datasets = [getattr(self, "train_set", None), getattr(self, "val_set", None)]
        list_decode_failures([d for d in datasets if d is not None], self.out, write_text)


def packed_history(history: list):
    """The checkpoint's form of a run's history: pretraining's (step, loss) of every step as two tensors, which the
    checksum hashes and torch saves as bytes (a million steps in milliseconds, not a hashed repr per number); the
    per-epoch rows of finetune and segment as they are."""
    if not history or not isinstance(history[0], tuple):
        return history
    steps = torch.tensor([step for step, _ in history], dtype=torch.int64)  # not zip(*history): slow at 1M steps
    return {"step": steps, "loss": torch.tensor([loss for _, loss in history], dtype=torch.float64)}


def unpacked_history(saved) -> list:
    """The history as the run keeps it (`packed_history` undone: the same ints and floats, bit for bit)."""
    if isinstance(saved, dict):
        return list(zip(saved["step"].tolist(), saved["loss"].tolist()))
    return list(saved)
