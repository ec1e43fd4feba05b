"""The pretraining loop. It knows neither the task nor the method: corrupt, loss, step, log, checkpoint."""

import dataclasses
import sys
import time
from contextlib import nullcontext
from functools import partial
from pathlib import Path

import torch

import pretexts
from pretexts.backbones.factory import running_stat_norms
from pretexts.engine.data.datasets import build_source, recorded_spec
from pretexts.engine.data.image_check import report_skipped
from pretexts.engine.data.loader import (
    Augment,
    AugmentedImages,
    batches,
    held_out_batches,
    make_loader,
    pretrain_transform,
    to_device,
    unaugmented_transform,
)
from pretexts.engine.data.stream_inputs import no_val_note, training_stream
from pretexts.engine.data.streams import ImageStream, is_stream
from pretexts.engine.methods.base import HeldOut, Method
from pretexts.engine.training import distributed
from pretexts.engine.training.arithmetic import arithmetic
from pretexts.engine.training.caller_state import keeps_caller_state
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.compile_choice import run_compile_choice
from pretexts.engine.training.config import PretrainConfig
from pretexts.engine.training.config_record import DERIVED, carry_derived, derived_of, note_resolved, saved_settings
from pretexts.engine.training.experiment_log import NoLog, log_line, open_experiment_log
from pretexts.engine.training.figures import loss_curve, restoration_figure
from pretexts.engine.training.file_writes import open_log, write_json, write_text
from pretexts.engine.training.monitor import Monitor, match_monitor_labels, monitor_figure, same_images
from pretexts.engine.training.nonfinite import check_finite_weights
from pretexts.engine.training.optimizer_step import split_sample
from pretexts.engine.training.precision import autocast, precision_name
from pretexts.engine.training.preflight import check_backbone_fits, check_output_dir, check_task_fits, checkpoint_bytes
from pretexts.engine.training.pretrain_checkpoint import check_resumed_inputs, pretrain_entries, same_arguments
from pretexts.engine.training.progress import held_out_ratio, progress, stderr_line
from pretexts.engine.training.recipes import AUTO_SCHEDULE, resolved_schedule, schedule_line
from pretexts.engine.training.resume import check_continues
from pretexts.engine.training.resume_config import PRETRAIN_MAY_CHANGE, recorded_setting
from pretexts.engine.training.run_base import TrainingRun
from pretexts.engine.training.settings import expect_config
from pretexts.engine.training.taken_output import refuse_taken_output_dir
from pretexts.errors import DataError, ParameterError
from pretexts.registry import METHODS


def step_seed(seed: int, global_step: int, rank: int = 0) -> int:
    """The corruption seed of one optimiser step: a resumed run draws the same corruptions."""
    return hash((seed, global_step, rank)) & 0x7FFFFFFFFFFF


def build_optimizer(method: Method, cfg: PretrainConfig) -> torch.optim.AdamW:
    """AdamW (betas and weight decay from the recipe; paper, Table A) over the method's parameter groups."""
    return torch.optim.AdamW(method.param_groups(), lr=cfg.peak_lr, betas=cfg.betas)


class Pretrainer(TrainingRun):
    """One pretraining run of any method: `Pretrainer(cfg).run()` returns the results `pretrain` describes.

    The loop knows no method: `cfg.method` names a registered `Method`, which builds the model and gives each step's
    sample and loss, the held-out error and the figure; `method` passes a `Method` subclass (tests, a new method)."""

    seconds_before, session_start = 0.0, None  # wall seconds of earlier sessions (a resume), and this one's start

    def __init__(self, cfg: PretrainConfig, method: type[Method] | None = None):
        expect_config(cfg, PretrainConfig)
        self.echo = stderr_line
        self.begin(cfg, cfg.accum_iter)
        refuse_taken_output_dir(cfg.out, cfg.resume, cfg.force, inputs=[cfg.data])  # before the data is scanned
        self.method = (method or METHODS.get(cfg.method))(
            cfg, pretexts.create_pretext(cfg.task, **cfg.task_args), self.device
        )
        self.train_set = self._dataset("train", pretrain_transform(cfg.img_size), streamed=True)
        if len(self.train_set) < cfg.batch_size:
            raise DataError(
                f"data '{cfg.data}' has {len(self.train_set)} training images, fewer than one "
                f"batch of {cfg.batch_size}; lower --batch-size."
            )
        self.val_set = self._dataset("val", unaugmented_transform(cfg.img_size))
        # the monitor's kNN scores val/ by train/'s class numbers, or is off where val/ has a class train/ lacks
        self.knn_off_note = (
            match_monitor_labels(self.train_set, self.val_set, cfg.keep_best) if cfg.monitor_every else None
        )
        total = self.plan_epochs(self.train_set)
        torch.manual_seed(cfg.seed)  # the model's initialisation draws from here, whatever reading the data drew
        model = self.method.build()
        # --compile auto weighs the method's measured gain and the run's length; a resume keeps the recorded choice
        self.compile_choice = run_compile_choice(cfg, self.method.compiled_gain(model), self.device.type, total)
        self.model = self.method.prepare(model, self.compile_choice.backend)
        # auto chooses once, as a run starts: a resume keeps what its checkpoint recorded
        resumed = recorded_setting(cfg, "schedule") if cfg.schedule == AUTO_SCHEDULE else None
        schedule = resumed or resolved_schedule(cfg.schedule, cfg.method, getattr(model, "backbone", None), total)
        self.schedule_note = schedule_line(cfg.schedule, schedule, total, resumed=bool(resumed))  # the start line's
        # the run's record (config.json, checkpoints): the config with what `auto` resolved to, noting what was derived
        self.record = dataclasses.replace(
            cfg,
            compile=self.compile_choice.backend,
            schedule=schedule,
            grad_checkpointing=cfg.grad_checkpointing and not running_stat_norms(getattr(model, "backbone", model)),
            method_args=dict(self.method.args),
            data=recorded_spec(cfg.data),
        )
        note_resolved(self.record, cfg)
        self.task = self.method.task
        self.replicated = distributed.replicate(self.model, self.device) if self.world > 1 else None
        check_backbone_fits(self.model, cfg.backbone, cfg.img_size, self.device, self.method.probe_forward)
        check_task_fits(self.task, cfg.img_size, self.device)
        self.schedule(build_optimizer(self.method, cfg), cfg.peak_lr if schedule == "constant" else cfg.min_lr, total)
        self.guard_steps(self.model, cfg.img_size, self.method.probe_forward)
        self.nonfinite.initial_hint = self.method.nonfinite_hint or self.nonfinite.initial_hint
        self.progress_lines(total)
        self.batch = 0  # the next batch of the epoch (a stop part-way through saves it)
        self.experiment = NoLog()
        self.monitor, self.monitor_state = None, None
        self.measured: HeldOut | None = None  # the held-out report measured since the last progress line
        self.last_stats: dict = {}  # the last step's, for the epoch's progress line

    def save(self, path: Path | None = None) -> Path:
        """OUT/checkpoint.pt (or `path`): the run's state at this step, from which --resume continues."""
        path = path or self.out / self.resume_file
        check_finite_weights(self.model, self.global_step, self.out)
        monitor = self.monitor.state() if self.monitor else self.monitor_state
        entries = {**pretrain_entries(self, monitor), DERIVED: derived_of(self.record)}
        save_checkpoint({**self.epoch_state(None, self.record), **entries}, path)
        return path

    def load(self, path: Path) -> None:
        same = same_arguments(self.cfg, self.task, self.method)
        check = partial(check_resumed_inputs, self, path=path)
        ckpt = self.resume_epochs(path, "pretrain", PRETRAIN_MAY_CHANGE, same, check, resolved=self.record)
        check_continues(ckpt, path, self.cfg.epochs, self.out)
        carry_derived(self.record, ckpt)  # config.json keeps naming what the run derived as it started
        self.batch, self.monitor_state = ckpt["batch"], ckpt.get("monitor")
        self.seconds_before = ckpt.get("seconds", 0.0)

    def trained_seconds(self) -> float:
        """Wall seconds the run has trained, over every session of a resumed run."""
        return self.seconds_before + (time.time() - self.session_start if self.session_start else 0.0)

    def compute_loss(self, sample) -> torch.Tensor:
        """The method's loss of one sample, under autocast when the run asks for it (the step's loss function)."""
        with autocast(self.device, self.dtype):
            return self.method.loss(sample)

    def _dataset(self, split: str, transform, streamed: bool = False) -> AugmentedImages | ImageStream | None:
        """The split's images; `streamed`: a shard's training images stream, the fixed ones are read from its first."""
        cfg = self.cfg
        if split == "train" and isinstance(getattr(self, "train_set", None), AugmentedImages):
            return same_images(self.train_set, transform)  # the folder scanned once, a bad file warned about once
        if streamed and not cfg.dataset and is_stream(cfg.data):
            per_rank = cfg.batch_size // self.world
            return training_stream(cfg.data, Augment(transform), cfg.seed, self.rank, self.world, cfg.workers, per_rank)
        wanted = max(cfg.eval_images, cfg.monitor_images, cfg.figure_images)
        limit = "the largest of --eval-images, --monitor-images and --figure-images"
        source = build_source(
            cfg.data, split, cfg.img_size, cfg.seed, dataset=cfg.dataset, max_images=wanted, limit=limit
        )
        return None if source is None else AugmentedImages(source, transform, cfg.seed)

    # ---- one step -------------------------------------------------------------------------------
    def train_step(self, images: torch.Tensor) -> dict:
        """One optimiser step on one batch (`accum_iter` micro-batches: one micro-batch's memory, the batch's
        gradient); a skipped step counts too, so the schedule and the log stay aligned."""
        generator = torch.Generator(device=self.device).manual_seed(
            step_seed(self.cfg.seed, self.global_step, self.rank)
        )

        # the whole batch corrupted once, then split: the micro-batches hold the whole batch's corruptions
        samples = split_sample(self.method.corrupt(images, generator), len(images), self.cfg.accum_iter)
        micro_batches = list(zip(images.chunk(self.cfg.accum_iter), samples))

        def loss_of(micro: tuple) -> torch.Tensor:  # under DDP inside the wrapper's forward: it arms the all-reduce
            return distributed.through(self.replicated, self.compute_loss, micro[1])

        stats = self.optimizer_step(loss_of, micro_batches, self.global_step + 1)
        self.global_step += 1
        if stats.skipped:
            return {"loss": stats.loss, "skipped": True}
        return {"loss": stats.loss, "lr": stats.lr, "grad_norm": stats.grad_norm, **self.method.step_stats()}

    # ---- the run --------------------------------------------------------------------------------
    def run(self) -> dict:
        """Train the remaining epochs into OUT (`cfg.out`); returns the results `pretrain` describes."""
        cfg = self.cfg
        with self.run_folder("train", inputs=[cfg.data]):
            if self.rank == 0:
                check_output_dir(self.out, checkpoint_bytes(self.model))
                write_json(self.out / "config.json", saved_settings(self.record))
                notes = [report_skipped([self.train_set, self.val_set], self.out, write_text), self.knn_off_note]
                if self.val_set is None:  # else the run's held-out line would be missing unexplained
                    notes.append(no_val_note(cfg.data))
                for note in filter(None, notes):
                    print(note, file=sys.stderr, flush=True)
                self.experiment = open_experiment_log(
                    cfg.logger, self.out, self.record.to_dict(), self.global_step + 1 if cfg.resume else None
                )
                self.monitor = self.build_monitor() if cfg.monitor_every else None
            try:
                return self.train_and_report()
            finally:
                self.experiment.close()

    def train_and_report(self) -> dict:
        cfg = self.cfg
        self.session_start = time.time()
        self.lines.begin(self.global_step)
        with self.stop:
            while self.epoch < cfg.epochs and not self.stop_requested():
                self.train_epoch()
                if self.stop_requested() and self.batch < self.steps_per_epoch:
                    break  # part-way through the epoch: the checkpoint keeps the position
                self.epoch, self.batch = self.epoch + 1, 0
                if self.rank == 0:
                    self.save()
                    self.end_of_epoch_outputs()
                    self.progress_line(self.epoch, end_of_epoch=True)
        results = {
            "epochs": self.epoch,
            "optimizer_steps": self.global_step,
            "seconds": self.trained_seconds(),
            "skipped_nonfinite_steps": self.nonfinite.skipped,
            "arithmetic": arithmetic(self.device, self.world, precision_name(self.dtype)),
        }
        if self.stop_requested() and self.epoch < cfg.epochs:
            if self.rank == 0:
                self.save()
            return {**results, "interrupted": self.stop.signal.name, "exit_code": self.stop.exit_code}
        if self.rank == 0:
            if self.val_set is not None:
                results["held_out"] = self.held_out_now().to_dict()
            if self.monitor:
                results["monitor"] = self.monitor.summary(results["seconds"])
            self.write_results(results)
        return results

    # ---- the representation while it forms ------------------------------------------------------
    def build_monitor(self) -> Monitor:
        """The monitor's fixed images: held-out ones, and training ones (unaugmented) as the kNN bank."""
        cfg = self.cfg
        train = self._dataset("train", unaugmented_transform(cfg.img_size))
        bank = train if self.val_set is not None and not self.knn_off_note else None
        monitor = Monitor(self.method, self.val_set or train, bank, cfg.monitor_images, cfg.seed, self.device)
        if cfg.keep_best and cfg.keep_best.startswith("knn") and not monitor.labelled:
            raise ParameterError(
                f"--keep-best {cfg.keep_best} needs labelled data with held-out images; '{cfg.data}' "
                f"has none. Keep the best by rankme or top_pc_share instead."
            )
        monitor.load_state(self.monitor_state)
        return monitor

    def monitor_now(self) -> dict:
        stats = self.monitor.measure(self.global_step)
        if self.cfg.keep_best and self.monitor.improved(self.cfg.keep_best):
            self.save(self.out / "best.pt")
        return stats

    def figure_due(self) -> bool:
        """`--figure-every N`: after every Nth epoch and always after the last (0: the last only)."""
        every = self.cfg.figure_every
        return self.epoch == self.cfg.epochs or bool(every) and self.epoch % every == 0

    def end_of_epoch_outputs(self) -> None:
        """When `figure_due`, the figure and monitor.png; with a logging backend, those and the held-out error there."""
        path = self.out / f"{self.method.figure_name}_epoch{self.epoch:03d}.png"
        if self.figure_due():
            self.figure(path)
            if self.monitor and self.monitor.history:
                title = f"{self.method.default_title()}, held-out features"
                monitor_figure(self.monitor.history, self.out / "monitor.png", title)
        if not isinstance(self.experiment, NoLog):
            if self.figure_due():
                self.experiment.image(self.method.figure_name, path, self.global_step)
            if self.val_set is not None:
                self.held_out_now()

    def progress_line(self, epoch: int, end_of_epoch: bool, stats: dict | None = None) -> None:
        """The progress line off a terminal (an epoch's end, a `--log-every` step), with any held-out ratio since."""
        stats = self.last_stats if stats is None else stats
        shown = {k: stats[k] for k in self.method.step_stats() if k in stats}
        lr = self.optimizer.param_groups[0]["lr"]
        if end_of_epoch:
            result = held_out_ratio(self.measured) if self.measured is not None else ""
            self.measured = None
            self.lines.epoch_line(epoch, self.global_step, lr, shown, result)
        else:
            self.lines.step_line(epoch, self.global_step, lr, shown)

    def held_out_now(self) -> HeldOut:
        """The method's held-out report at this step, measured once however many outputs ask for it (after
        `run`, the final one: `held_out_now().format()` is the line `pretexts train` prints)."""
        if getattr(self, "_held_out", (None,))[0] != self.global_step:
            self._held_out = (self.global_step, self.held_out_error())
            self.measured = self._held_out[1]
            self.experiment.scalars({"held_out": self._held_out[1].to_dict()}, self.global_step)
        return self._held_out[1]

    def stop_requested(self) -> bool:
        """SIGTERM or Ctrl-C arrived; checked between optimiser steps (all ranks must agree under DDP)."""
        return distributed.agreed_stop(self.stop, self.device, self.world)

    def train_epoch(self) -> None:
        cfg = self.cfg
        self.model.train()
        self.sampler.set_position(self.epoch, self.batch * (cfg.batch_size // self.world))
        loader = make_loader(self.train_set, cfg.batch_size // self.world, self.sampler, cfg.workers)
        title = f"epoch {self.epoch + 1}/{cfg.epochs}"
        bar = progress(self.steps_per_epoch, title, cfg.quiet, self.batch, enabled=self.rank == 0)
        self.lines.restart_clock()
        with (
            open_log(self.out / "log.jsonl") if self.rank == 0 else nullcontext() as log,
            bar,
            batches(loader) as images_and_labels,
        ):
            for images, _ in images_and_labels:
                if self.batch >= self.steps_per_epoch:
                    break
                stats = self.train_step(to_device(images, self.device))
                self.batch += 1
                self.history.append((self.global_step, stats["loss"]))
                self.lines.step(stats["loss"], cfg.batch_size // self.world * self.world)
                self.last_stats = stats
                shown = ("loss", *self.method.step_stats()) if "skipped" not in stats else ("loss",)
                bar.set_postfix({k: f"{stats[k]:.4f}" for k in shown if k in stats})
                bar.update()
                if log is not None:
                    if cfg.eval_every and self.global_step % cfg.eval_every == 0 and self.val_set is not None:
                        stats["held_out"] = self.held_out_now().to_dict()  # logged there, once per step
                    if self.monitor and self.monitor.due(
                        self.global_step,
                        cfg.monitor_every,
                        self.batch == self.steps_per_epoch,
                        self.epoch == cfg.epochs - 1,
                    ):
                        stats["monitor"] = self.monitor_now()
                    log.write(log_line({"step": self.global_step, "epoch": self.epoch, **stats}))
                    self.experiment.scalars({k: v for k, v in stats.items() if k != "held_out"}, self.global_step)
                    if self.lines.step_due(self.global_step) and self.batch < self.steps_per_epoch:
                        self.progress_line(self.epoch + 1, end_of_epoch=False, stats=stats)
                self.lines.restart_clock()  # img/s counts loading and stepping, not the evaluations above
                if self.stop_requested():
                    break
                if cfg.save_every and self.global_step % cfg.save_every == 0 and self.batch < self.steps_per_epoch:
                    if self.rank == 0:  # every rank holds the same weights; the epoch's end saves anyway
                        self.save()

    # ---- evaluation and outputs -----------------------------------------------------------------
    def val_batches(self, limit: int):
        """The same seeded subset of held-out images every time, drawn across all classes."""
        return held_out_batches(self.val_set, limit, self.cfg.seed, self.device, self.cfg.workers)

    def held_out_error(self) -> HeldOut:
        return self.method.held_out_error(self.val_batches(self.cfg.eval_images))

    def figure_batch(self) -> torch.Tensor:
        """The figure's images: the seeded held-out ones, or the first training images when there is no val/."""
        if self.val_set is not None:
            return next(iter(self.val_batches(self.cfg.figure_images)))
        first = self._dataset("train", pretrain_transform(self.cfg.img_size))  # a stream's first images too
        return to_device(torch.stack([first[(0, i)][0] for i in range(self.cfg.figure_images)]), self.device)

    def figure(self, path: Path) -> None:
        figure = self.method.figure(self.figure_batch())
        restoration_figure(figure.columns, path, f"{figure.title}, epoch {self.epoch}")

    def write_results(self, results: dict) -> None:
        if self.history:
            steps, losses = map(list, zip(*self.history))
            loss_curve(steps, losses, self.out / "loss_curve.png", self.method.default_title(), self.method.loss_name)
        write_json(self.out / "results.json", results)


@keeps_caller_state
def pretrain(cfg: PretrainConfig) -> dict:
    """Run the pretraining job `cfg` describes (`pretexts train`; under torchrun on every rank, rank 0 writing).

    Returns:
        The results, also OUT/results.json: `epochs`, `optimizer_steps`, `seconds`, `skipped_nonfinite_steps` and
            `arithmetic` (torch build, processes, threads, CPU; the GPU on CUDA). Once every epoch is done, on rank 0:
            `held_out` (the method's `HeldOut.to_dict()`: `corrupted_mse`, `restored_mse`, `images`, ...) where the
            data has a val split, and `monitor` (`last`, `best`, `measurements`, `seconds`, `share_of_run`) unless
            `monitor_every=0`. A run stopped by SIGTERM or Ctrl-C returns `interrupted` (the signal's name) and
            `exit_code` instead of those two and writes no results.json (`PretrainConfig.resuming` continues it)."""
    try:
        return Pretrainer(cfg).run()
    finally:
        distributed.teardown()
