"""Fine-tuning a pretrained (or random) backbone through timm, with the paper's recipe (Appendix A, Table A) or the
small-data one (engine/evaluation/finetune_recipes.py; `auto` picks by the data).

Under torchrun every rank trains on its share of each global batch (`--batch-size`), DDP averages the gradients,
and validation is split over the ranks and summed; rank 0 alone writes. Each image's augmentation is seeded by
(seed, epoch, index), so without mixup/cutmix (which mix within a rank's share) and drop-path two ranks take the
same steps as one process."""

import dataclasses
import math
import random
import time
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import numpy as np
import torch
from timm.data import Mixup
from timm.loss import LabelSmoothingCrossEntropy, SoftTargetCrossEntropy
from timm.optim import create_optimizer_v2
from torch.utils.data import DataLoader

from pretexts.backbones.normalisation import normalisation
from pretexts.backbones.vit_tokens import LEARNED_POSITIONS, starting_positions
from pretexts.engine.data.datasets import recorded_spec
from pretexts.engine.data.image_check import report_skipped
from pretexts.engine.data.labelled_data import (
    LabelledImages,
    class_balanced_subset,
    class_names,
    eval_transform,
    labels_of,
    train_transform,
)
from pretexts.engine.data.stream_inputs import (
    SeededTransform,
    finetune_stream_inputs,
    streamed_classes,
    training_stream,
)
from pretexts.engine.data.streams import is_stream
from pretexts.engine.evaluation import linear_probe_protocol as linear_probe
from pretexts.engine.evaluation.finetune_config import FinetuneConfig
from pretexts.engine.evaluation.finetune_recipes import resolve_recipe
from pretexts.engine.evaluation.finetune_report import BEST, FINAL, finetune_reference, finetune_results
from pretexts.engine.evaluation.pretrained import (
    classifier_from,
    create_classifier,
    downstream_data,
    downstream_splits,
    repooled_note,
    resampled_positions_note,
    timm_spec,
)
from pretexts.engine.training import distributed
from pretexts.engine.training.caller_state import keeps_caller_state
from pretexts.engine.training.checkpoint import load_checkpoint, save_checkpoint
from pretexts.engine.training.config_record import DERIVED, carry_derived, derived_of, note_resolved, saved_settings
from pretexts.engine.training.experiment_log import log_line
from pretexts.engine.training.file_writes import open_log, write_json, write_text
from pretexts.engine.training.nonfinite import check_finite_weights
from pretexts.engine.training.precision import autocast
from pretexts.engine.training.preflight import check_backbone_fits, check_output_dir, checkpoint_bytes
from pretexts.engine.training.progress import progress, stderr_line
from pretexts.engine.training.resume_config import FINETUNE_MAY_CHANGE
from pretexts.engine.training.run_base import TrainingRun
from pretexts.engine.training.settings import expect_config
from pretexts.engine.training.taken_output import refuse_taken_output_dir
from pretexts.errors import DataError


def build_finetune_optimizer(model: torch.nn.Module, cfg: FinetuneConfig) -> torch.optim.Optimizer:
    """AdamW with layer-wise lr decay (timm's param_groups_layer_decay): group lr = lr x lr_scale; a linear probe's
    head alone with LARS."""
    if cfg.linear_probe:
        return linear_probe.lars_for_head(model, cfg.peak_lr, cfg.weight_decay)
    return create_optimizer_v2(
        model,
        "adamw",
        lr=cfg.peak_lr,
        weight_decay=cfg.weight_decay,
        betas=cfg.betas,
        layer_decay=cfg.layer_decay if cfg.layer_decay < 1 else None,
    )


def build_criterion(cfg: FinetuneConfig) -> torch.nn.Module:
    """Soft-target CE under mixup/cutmix (they carry the smoothing), else label smoothing (MAE's choice)."""
    if cfg.mixing:
        return SoftTargetCrossEntropy()
    if cfg.smoothing > 0:
        return LabelSmoothingCrossEntropy(cfg.smoothing)
    return torch.nn.CrossEntropyLoss()


@torch.no_grad()
def top1_accuracy(model: torch.nn.Module, loader, device, dtype=None, world: int = 1) -> float:
    """Top-1 accuracy in percent (over every rank's shard of the images under torchrun)."""
    was_training = model.training
    model.eval()
    distributed.share_buffers(model, world)
    correct = total = 0
    for images, labels in loader:
        with autocast(device, dtype):
            logits = model(images.to(device))
        correct += (logits.argmax(-1).cpu() == labels).sum().item()
        total += labels.numel()
    model.train(was_training)
    correct, total = distributed.sum_over_ranks(torch.tensor([correct, total]), device, world).tolist()
    return 100.0 * correct / max(total, 1)


class Finetuner(TrainingRun):
    """One fine-tuning run: `Finetuner(cfg).run()` returns the results `finetune` describes."""

    def __init__(self, cfg: FinetuneConfig, echo: Callable[[str], None] = stderr_line):
        expect_config(cfg, FinetuneConfig)
        self.echo = echo
        asked, cfg = cfg, dataclasses.replace(cfg)  # the run's record is this copy, resolved below
        # paths recorded absolute, as train records its data: a --resume or --config of the run works from any folder
        cfg.checkpoint = recorded_spec(cfg.checkpoint) if cfg.checkpoint else None
        cfg.data = recorded_spec(cfg.data) if cfg.data else cfg.data
        self.begin(cfg, cfg.accum_iter)
        refuse_taken_output_dir(cfg.out, cfg.resume, cfg.force, inputs=[cfg.checkpoint, cfg.data])  # before the data
        random.seed(cfg.seed)  # timm's RandAugment draws from Python's random and numpy's in the main process,
        np.random.seed(cfg.seed)  # Mixup from numpy's
        # the checkpoint's config first: its data is the default when --data is not given
        ckpt = load_checkpoint(cfg.checkpoint, kinds=("pretrain",)) if cfg.checkpoint else None
        cfg.data, self.data_origin = downstream_data(cfg.data, ckpt and ckpt["config"].get("data"))
        # the size matters to 'synthetic' only
        streamed, indices = is_stream(cfg.data), None  # shards: the training split streams, val is read whole
        if streamed:
            train, val = finetune_stream_inputs(cfg.data, cfg.label_fraction, cfg.max_images)
            self.classes = streamed_classes(cfg.data, train)
        else:
            train, val = downstream_splits(cfg.data, self.data_origin, cfg.img_size or 32, cfg.seed)
            self.classes = class_names(train)
            if cfg.label_fraction:
                indices = class_balanced_subset(labels_of(train), cfg.label_fraction, cfg.seed)
        # the recipe (`auto` picks by these two) before anything reads its fields; the start line says which
        pretrained_size = ckpt["config"].get("img_size") if ckpt else None
        self.img_size = cfg.img_size or pretrained_size or 32  # another size rebuilds a ViT's positions for it
        self.recipe_note = resolve_recipe(cfg, len(train) if indices is None else len(indices), self.img_size)
        build = dict(num_classes=len(self.classes), drop_path_rate=cfg.drop_path, global_pool=cfg.global_pool)
        self.model, self.pretraining = (
            classifier_from(ckpt, cfg.checkpoint, cfg.backbone, cfg.img_size, resize=True, **build)
            if ckpt
            else create_classifier(None, cfg.backbone, cfg.img_size, cfg.positions, **build)
        )
        self.size_note = resampled_positions_note(self.model, pretrained_size, self.img_size) if ckpt else None
        self.pool_note = repooled_note(cfg.global_pool, self.model, ckpt) if ckpt else None
        self.start_positions = starting_positions(self.model)  # the table or not, before fine-tuning trains them
        if cfg.linear_probe:  # the backbone frozen, MAE's BatchNorm + linear head in place of the classifier
            linear_probe.attach_probe_head(self.model)
        if cfg.from_scratch:  # config.json records what auto resolved to (as probe's does)
            cfg.positions = self.start_positions or LEARNED_POSITIONS
        note_resolved(cfg, asked)  # and which values were derived: a --config of it derives them again
        self.model.to(self.device)
        self.backbone_name = self.pretraining.get("backbone") or cfg.backbone
        check_backbone_fits(self.model, self.backbone_name, self.img_size, self.device)
        mean, std = normalisation(self.model)
        augment = train_transform(self.img_size, mean, std, cfg.randaug_policy, cfg.crop_min_scale, cfg.reprob)
        per_rank = cfg.batch_size // self.world
        self.train_set = (
            training_stream(
                cfg.data,
                SeededTransform(augment),
                cfg.seed,
                self.rank,
                self.world,
                cfg.workers,
                per_rank,
                labelled=True,
            )
            if streamed
            else LabelledImages(train, augment, indices, seed=cfg.seed)
        )
        if len(self.train_set) < cfg.batch_size:
            raise DataError(
                f"data '{cfg.data}' has {len(self.train_set)} training images"
                f"{' after --label-fraction' if indices else ''}, fewer than one batch of "
                f"{cfg.batch_size}; lower --batch-size."
            )
        self.val_set = LabelledImages(val, eval_transform(self.img_size, mean, std, cfg.crop_pct))
        total = self.plan_epochs(self.train_set)
        self.schedule(build_finetune_optimizer(self.model, cfg), cfg.min_lr, total)
        self.mixup = (
            Mixup(
                mixup_alpha=cfg.mixup,
                cutmix_alpha=cfg.cutmix,
                prob=cfg.mixup_prob,
                switch_prob=cfg.mixup_switch_prob,
                label_smoothing=cfg.smoothing,
                num_classes=len(self.classes),
            )
            if cfg.mixing
            else None
        )
        self.criterion = build_criterion(cfg)
        # SyncBatchNorm (ResNets): the batch statistics of the global batch, as in one process
        self.replicated = (
            distributed.replicate(self.model, self.device, sync_batchnorm=True) if self.world > 1 else None
        )
        if self.world > 1:  # MAE's seed + rank: drop-path and mixup draw differently on each rank
            torch.manual_seed(cfg.seed + self.rank)
            np.random.seed(cfg.seed + self.rank)
        self.guard_steps(self.model, self.img_size)
        check_output_dir(self.out, checkpoint_bytes(self.model))  # made only once the run is known to start
        # one line per epoch (on stderr by default: `echo`), its top-1 appended; none under --quiet
        self.progress_lines(total, on_terminal=True, write=echo)

    def train_loader(self) -> DataLoader:
        """This rank's share of each global batch of the epoch, in the order one process would take them."""
        self.sampler.set_position(self.epoch)
        return DataLoader(
            self.train_set,
            batch_size=self.cfg.batch_size // self.world,
            sampler=None if self.sampler is self.train_set else self.sampler,  # a stream orders itself
            drop_last=True,
            num_workers=self.cfg.workers,
            pin_memory=self.device.type == "cuda",
        )

    def val_loader(self) -> DataLoader:
        return DataLoader(
            distributed.shard(self.val_set, self.rank, self.world),
            batch_size=256,
            num_workers=self.cfg.workers,
            pin_memory=self.device.type == "cuda",
        )

    def compute_loss(self, micro_batch) -> torch.Tensor:
        """The criterion on one micro-batch of (images, labels), the model under autocast when the run asks for it,
        the loss in float32 whatever its dtype (CPU autocast keeps label smoothing's log_softmax in bf16/fp16)."""
        images, labels = micro_batch
        with autocast(self.device, self.dtype):
            return distributed.through(
                self.replicated, lambda x, y: self.criterion(self.model(x).float(), y), images, labels
            )

    def train_epoch(self) -> float:
        linear_probe.train_mode(self.model)  # a linear probe's frozen backbone stays in eval mode
        losses = []
        bar = progress(self.steps_per_epoch, f"epoch {self.epoch + 1}/{self.cfg.epochs}", self.cfg.quiet)
        self.lines.restart_clock()
        for batch, (images, labels) in enumerate(self.train_loader()):
            if batch >= self.steps_per_epoch or distributed.agreed_stop(self.stop, self.device, self.world):
                break
            images, labels = images.to(self.device), labels.to(self.device)
            if self.mixup is not None:
                images, labels = self.mixup(images, labels)
            # gradient accumulation: micro-batches of batch / accum_iter images, one optimiser step
            micro_batches = list(zip(images.chunk(self.cfg.accum_iter), labels.chunk(self.cfg.accum_iter)))
            stats = self.optimizer_step(self.compute_loss, micro_batches, self.global_step + 1)
            self.global_step += 1
            self.lines.step(stats.loss, len(images) * self.world)
            if self.lines.step_due(self.global_step) and batch + 1 < self.steps_per_epoch:
                self.lines.step_line(self.epoch + 1, self.global_step, stats.lr)
            if not stats.skipped:  # a skipped step's loss is NaN or inf: it stays out of the epoch's mean
                losses.append(stats.loss)
            bar.set_postfix(loss=f"{stats.loss:.4f}")
            bar.update()
        bar.close()
        return sum(losses) / len(losses) if losses else math.nan  # NaN: no step of this epoch was taken

    def run(self) -> dict:
        """Train the remaining epochs, saving OUT/checkpoint.pt after each. SIGTERM or Ctrl-C stops the run
        at the next step; the last epoch's checkpoint is kept and `--resume` continues from it."""
        cfg = self.cfg
        with self.run_folder("finetune", inputs=[cfg.checkpoint, cfg.data]):
            if self.rank == 0:
                write_json(self.out / "config.json", saved_settings(cfg))
                # as train does, through `echo` (stderr; compare's cells silence it); the scan's size is not the
                # crop's (the checkpoint's), so no small-image count
                note = report_skipped([self.train_set, self.val_set], self.out, write_text, small=False)
                if note:
                    self.echo(note)
            return self.train_and_report()

    def train_and_report(self) -> dict:
        cfg = self.cfg
        start = time.time()
        val_loader = self.val_loader()
        self.lines.begin(self.global_step)
        writing = self.rank == 0
        with open_log(self.out / "log.jsonl", truncate=not cfg.resume) if writing else nullcontext() as log, self.stop:
            while self.epoch < cfg.epochs:
                loss = self.train_epoch()
                if self.stop.requested:
                    return self.interrupted()
                self.epoch += 1
                top1 = top1_accuracy(self.model, val_loader, self.device, self.dtype, self.world)
                row = {
                    "epoch": self.epoch,
                    "step": self.global_step,
                    "loss": loss,
                    "top1": top1,
                    "lr": max(g["lr"] for g in self.optimizer.param_groups),
                }
                self.history.append(row)
                check_finite_weights(self.model, self.global_step, self.out)
                if writing:
                    log.write(log_line(row))
                    if top1 > max((r["top1"] for r in self.history[:-1]), default=-1.0):  # ties keep the earlier one
                        self.save(BEST)
                    self.save_checkpoint()
                self.lines.epoch_line(self.epoch, self.global_step, row["lr"], result=f"val top-1 {top1:.2f}%")
        results = finetune_results(self, time.time() - start)
        if writing:
            self.save(FINAL)
            write_json(self.out / "results.json", results)
        return results

    def reference(self, final: float, best: float) -> dict:
        """results.json's "reference" for these final and best top-1 (engine/evaluation/finetune_report.py)."""
        return finetune_reference(self, final, best)

    def save_checkpoint(self) -> Path:
        """OUT/checkpoint.pt: everything `--resume` needs to continue after this epoch as if never stopped."""
        path = self.out / self.resume_file
        save_checkpoint({**self.epoch_state("finetune"), "timm": self.timm_spec(), DERIVED: derived_of(self.cfg)}, path)
        return path

    def load(self, path: Path) -> None:
        carry_derived(self.cfg, self.resume_epochs(path, "finetune", FINETUNE_MAY_CHANGE))

    def timm_spec(self) -> dict:
        """How timm rebuilds this classifier: `pretexts export` reads it from either checkpoint."""
        pool = self.cfg.global_pool or self.pretraining.get("global_pool")
        timm_name, kwargs = timm_spec(self.backbone_name, self.img_size, self.model, pool)
        kwargs = {**kwargs, "num_classes": len(self.classes)}
        return {"name": timm_name, "kwargs": kwargs, "classes": self.classes, "img_size": self.img_size}

    def save(self, name: str = FINAL) -> Path:
        """OUT/finetuned.pt (the final weights) or OUT/best.pt (the best epoch's, by val top-1): timm state dict
        under 'model' (timm's load_checkpoint reads it), how to build it, and the epoch and top-1 it holds."""
        spec = self.timm_spec()
        path = self.out / name
        save_checkpoint(
            {
                "kind": "finetuned",
                "model": linear_probe.classifier_state(self.model),  # a linear probe's BatchNorm folded in
                "timm": spec,
                "timm_name": spec["name"],
                "timm_kwargs": spec["kwargs"],
                "classes": self.classes,
                "config": self.cfg.to_dict(),
                "epoch": self.epoch,
                "top1": self.history[-1]["top1"],
            },
            path,
        )
        return path


@keeps_caller_state
def finetune(cfg: FinetuneConfig, echo: Callable[[str], None] = stderr_line) -> dict:
    """Run the fine-tuning job `cfg` describes (`pretexts finetune`; under torchrun on every rank, rank 0 writing).

    Args:
        cfg: The run's settings.
        echo: Where each progress and note line goes (stderr by default; `lambda line: None` silences them).

    Returns:
        The results, also OUT/results.json once every epoch is done (each top-1 in percent, on what `accuracy` says):

            - `protocol`: a fine-tune, or MAE's linear probe (`linear_probe`), in words;
            - `top1` (one per epoch), `final_top1`, `best_top1` and `best_epoch` (the first of equals);
            - `accuracy` (what the top-1 was measured on, in words), `epochs`, `weights` (the files in OUT of the
              final and the best epoch's weights), `optimizer_steps`, `skipped_nonfinite_steps`, `seconds`,
              `train_images`, `val_images`, `classes`, `processes`, `arithmetic` (torch build, threads, CPU; the GPU
              on CUDA) and `backbone`;
            - `reference`: the val set's `val_images`, `classes`, `chance_top1` and `chance_rule`, the Wilson 95 %
              intervals `ci95` of `final_top1` and `best_top1` (`interval` says how they are computed), and
              `random_init` (how to measure the random-init reference);
            - `checkpoint` and `pretraining` (its `method`, `task` and `task_args`): None from scratch.

            A run stopped by SIGTERM or Ctrl-C returns only `interrupted` (the signal's name), `exit_code`, `epochs`
            and `optimizer_steps`, and writes no results.json: `finetune(FinetuneConfig.resuming(cfg.out))` continues
            it from OUT/checkpoint.pt.
    """
    return Finetuner(cfg, echo).run()
