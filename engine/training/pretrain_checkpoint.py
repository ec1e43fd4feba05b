"""Pretraining's checkpoints: `Pretrainer.save` writes the run's state, `Pretrainer.load` resumes it after checking
that the checkpoint continues this run (its config, and its task's scaled parameters as they resolve now)."""

import dataclasses
from pathlib import Path

import pretexts
from pretexts.engine.training.arithmetic import arithmetic, resumed_arithmetic_note
from pretexts.engine.training.checkpoint import FORMAT_VERSION, save_checkpoint
from pretexts.engine.training.nonfinite import check_finite_weights
from pretexts.engine.training.progress import stderr_line
from pretexts.engine.training.resume import (
    check_continues,
    checkpoint_to_resume,
    restore_training_state,
    training_state,
)
from pretexts.engine.training.resume_config import PRETRAIN_MAY_CHANGE, check_resumable
from pretexts.errors import CheckpointError


class PretrainCheckpoints:
    """`Pretrainer`'s checkpoint methods. They read and set the trainer's run state (cfg, out, rank, world, device,
    record, method, task, model, optimizer, scheduler, scaler, epoch, batch, global_step, history, nonfinite,
    monitor, monitor_state)."""

    def save(self, path: Path | None = None) -> Path:
        path = path or self.out / "checkpoint.pt"
        check_finite_weights(self.model, self.global_step, self.out)
        save_checkpoint(
            {
                "format_version": FORMAT_VERSION,
                "pretexts_version": pretexts.__version__,
                "config": self.record.to_dict(),
                **training_state(self.model, self.optimizer, self.scheduler, self.scaler),
                "epoch": self.epoch,
                "batch": self.batch,
                "global_step": self.global_step,
                "history": self.history,
                "nonfinite_skipped": self.nonfinite.skipped,
                "monitor": self.monitor.state() if self.monitor else self.monitor_state,
                "task_sizes": self.task_sizes(),
                "arithmetic": arithmetic(self.device, self.world),
            },
            path,
        )
        return path

    def load(self, path: Path) -> None:
        ckpt = checkpoint_to_resume(path, self.cfg.resume == "auto", self.out)
        check_resumable(ckpt["config"], self.cfg, PRETRAIN_MAY_CHANGE, path, self.same_arguments)
        self.check_task_sizes(ckpt.get("task_sizes"), path, ckpt.get("pretexts_version"))
        restore_training_state(ckpt, path, self.cfg.epochs, self.model, self.optimizer, self.scheduler, self.scaler)
        check_continues(ckpt, path, self.cfg.epochs, self.out)
        self.epoch, self.batch, self.global_step = ckpt["epoch"], ckpt["batch"], ckpt["global_step"]
        self.history = list(ckpt.get("history", []))
        self.nonfinite.skipped = ckpt.get("nonfinite_skipped", 0)
        self.monitor_state = ckpt.get("monitor")
        note = resumed_arithmetic_note(ckpt.get("arithmetic"), arithmetic(self.device, self.world), path)
        if note and self.rank == 0:
            stderr_line(note)

    def task_sizes(self) -> dict:
        """The task's scaled parameters as they resolve at the run's image size (`Pretext.sizes`)."""
        return pretexts.create_pretext(self.cfg.task, **self.cfg.task_args).sizes(self.cfg.img_size)

    def check_task_sizes(self, saved: dict | None, path: Path, version: str | None) -> None:
        """A checkpoint's scaled task parameters must resolve as they did when it was written."""
        now = self.task_sizes()
        if saved is not None and saved != now:
            raise CheckpointError(
                f"checkpoint '{path}' was trained with the task's scaled parameters {saved}; "
                f"this version resolves them to {now} at {self.cfg.img_size} px, so it cannot "
                f"continue the run as it was: resume it with the pretexts version that wrote it "
                f"({version or 'unknown'}), or start a new run with --out."
            )

    def same_arguments(self, name: str, saved: dict, asked: dict) -> bool:
        """Task and method arguments compared as the task and the method read them ('4' equals 4); those the
        method lets a resumed run change (`Method.resume_may_change`) are not compared."""
        if name == "task_args":
            return pretexts.create_pretext(self.cfg.task, **saved).values() == self.task.values()
        method = type(self.method)
        before = method.parse_args(dataclasses.replace(self.cfg, method_args=saved))
        return all(before[k] == v for k, v in self.method.args.items() if k not in method.resume_may_change)
