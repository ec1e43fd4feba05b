"""Fine-tune backbone + head on a segmentation folder; mIoU and pixel accuracy on validation each epoch.

Under torchrun each rank trains on its share of every global batch (`--batch-size`) with DDP and scores its shard
of the validation images; the crops are seeded by (seed, epoch, index), so the ranks take one process's steps.
OUT/segmenter.pt, written after each epoch, holds the model and all a `--resume` needs to continue as if never
stopped."""

import dataclasses
import math
import tempfile
from collections.abc import Callable
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.optim._param_groups import param_groups_layer_decay
from timm.scheduler import PolyLRScheduler

from pretexts.backbones.normalisation import normalisation
from pretexts.engine.data.datasets import recorded_spec
from pretexts.engine.data.loader import EpochSampler
from pretexts.engine.evaluation.pretrained import create_classifier, resampled_positions_note
from pretexts.engine.training import distributed
from pretexts.engine.training.caller_state import keeps_caller_state
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.config_record import saved_settings
from pretexts.engine.training.experiment_log import log_line
from pretexts.engine.training.file_writes import open_log, write_json
from pretexts.engine.training.nonfinite import check_finite_weights
from pretexts.engine.training.precision import autocast
from pretexts.engine.training.preflight import check_backbone_fits
from pretexts.engine.training.progress import stderr_line
from pretexts.engine.training.resume_config import SEGMENT_MAY_CHANGE
from pretexts.engine.training.run_base import TrainingRun
from pretexts.engine.training.settings import expect_config
from pretexts.errors import ParameterError

from .config import SegmentConfig
from .data import SegmentationFolder, collate_eval, refuse_shards
from .figure import save_figure
from .generate import write_generated
from .heads import Segmenter
from .metrics import IGNORE, MIOU, PIXEL_ACC, confusion, scores


class LayerDecayView:
    """The segmenter as timm's layer-decay grouping sees a classifier: the backbone's parameters under their own
    names (its `group_matcher` and `no_weight_decay()` apply to them), the pyramid and head under `decode.`, which
    no matcher claims, so they take the classifier's slot: scale 1, the top block layer_decay ** 1, the embeddings
    layer_decay ** (depth + 1), as BEiT's and MAE's ADE20K LayerDecayOptimizerConstructor."""

    prefix = "features.backbone."

    def __init__(self, model: Segmenter):
        self.model, backbone = model, model.features.backbone
        if hasattr(backbone, "group_matcher"):
            self.group_matcher = backbone.group_matcher
        self.pretrained_cfg = {"classifier": "decode."}  # timm's fallback grouping, for a backbone without a matcher

    def named_parameters(self):
        for name, param in self.model.named_parameters():
            yield (name[len(self.prefix) :] if name.startswith(self.prefix) else f"decode.{name}"), param


def optimizer_for(model: Segmenter, cfg: SegmentConfig) -> torch.optim.Optimizer:
    """AdamW over timm's layer-decay groups of the whole segmenter (`LayerDecayView`); no weight decay on 1-D
    parameters and biases (the decode head's included) nor on the backbone's `no_weight_decay()` names, as
    `finetune` and BEiT's constructor exempt them."""
    backbone = model.features.backbone
    skip = backbone.no_weight_decay() if hasattr(backbone, "no_weight_decay") else ()
    groups = param_groups_layer_decay(
        LayerDecayView(model), cfg.weight_decay, no_weight_decay_list=skip, layer_decay=cfg.layer_decay
    )
    return create_optimizer_v2(groups, "adamw", lr=cfg.lr, weight_decay=cfg.weight_decay)


@torch.no_grad()
def predict(model, images: torch.Tensor, crop: int, mode: str) -> torch.Tensor:
    """Logits at full size: one pass ('whole') or overlapping crop-size windows averaged ('slide', stride 2/3)."""
    if mode == "whole":
        return model(images)
    n, _, h, w = images.shape
    stride = max(1, crop * 2 // 3)
    logits, count = None, torch.zeros(1, 1, h, w, device=images.device)
    for y in sorted({*range(0, max(h - crop, 0) + 1, stride), max(h - crop, 0)}):
        for x in sorted({*range(0, max(w - crop, 0) + 1, stride), max(w - crop, 0)}):
            out = model(images[..., y : y + crop, x : x + crop])
            logits = logits if logits is not None else images.new_zeros(n, out.shape[1], h, w)
            logits[..., y : y + crop, x : x + crop] += out
            count[..., y : y + crop, x : x + crop] += 1
    return logits / count


@torch.no_grad()
def label_maps(model, images: torch.Tensor, sizes, crop: int, mode: str) -> list[torch.Tensor]:
    """Each image's predicted labels at its label map's own size (`sizes`, (H, W) each): the logits resized
    bilinearly to it, then the argmax, as mmsegmentation scores ADE20K."""
    maps = []
    for logits, size in zip(predict(model, images, crop, mode), sizes):
        if tuple(logits.shape[-2:]) != tuple(size):
            logits = F.interpolate(logits[None].float(), tuple(size), mode="bilinear", align_corners=False)[0]
        maps.append(logits.argmax(0))
    return maps


def evaluate(model, loader, num_classes: int, crop: int, mode: str, device, dtype=None, world: int = 1) -> dict:
    """mIoU and pixel accuracy on each original label map; under torchrun each rank scores its shard and the
    confusion matrices are summed. `loader` gives (images, masks), the masks a list or a batch."""
    model.eval()
    distributed.share_buffers(model, world)
    conf = torch.zeros(num_classes, num_classes, dtype=torch.long)
    for images, masks in loader:
        with autocast(device, dtype):
            preds = label_maps(model, images.to(device), [m.shape[-2:] for m in masks], crop, mode)
        for pred, mask in zip(preds, masks):
            conf += confusion(pred.cpu(), mask, num_classes)
    return scores(distributed.sum_over_ranks(conf, device, world))


class Segmentation(TrainingRun):
    """One segmentation run: `Segmentation(cfg).run()` returns the results (also in OUT/results.json)."""

    resume_file = "segmenter.pt"

    def __init__(self, cfg: SegmentConfig, echo: Callable[[str], None] = stderr_line):
        expect_config(cfg, SegmentConfig)
        if cfg.checkpoint is None and cfg.backbone is None:
            raise ParameterError("give --checkpoint CKPT, or --from-scratch with --backbone NAME.")
        refuse_shards(cfg.data)  # before OUT is claimed: a refused run leaves nothing behind
        # paths recorded absolute: a --resume or --config of the run works from any folder ('generated' is a name)
        checkpoint = recorded_spec(cfg.checkpoint) if cfg.checkpoint else None
        data = cfg.data if cfg.data == "generated" else recorded_spec(cfg.data)
        cfg = dataclasses.replace(cfg, checkpoint=checkpoint, data=data)
        self.echo = echo
        self.begin(cfg)
        # 'generated' is seeded: each process writes the same set into a folder of its own, removed after the run
        self.generated = tempfile.TemporaryDirectory(prefix="pretexts-segment-") if cfg.data == "generated" else None
        data = write_generated(self.generated.name) if self.generated else cfg.data
        # a checkpoint's backbone is rebuilt at --img-size, a ViT's positions resampled to it (MAE's ADE20K recipe
        # fine-tunes a 224 px checkpoint at 512 px)
        backbone, saved = create_classifier(
            cfg.checkpoint,
            None if cfg.checkpoint else cfg.backbone,
            cfg.img_size,
            resize=True,
            drop_path_rate=cfg.drop_path,
        )
        self.size = cfg.img_size or saved.get("img_size") or 32
        # on the CPU, where the pyramid's probe below runs: a size the backbone cannot take is one line, as in train
        check_backbone_fits(backbone, cfg.backbone or saved.get("backbone"), self.size, torch.device("cpu"))
        note = resampled_positions_note(backbone, saved.get("img_size"), self.size) if saved else None
        if note and self.rank == 0:
            echo(note)
        # the mean and std the backbone was pretrained with (a ViT's 0.5s), as finetune and probe normalise
        mean, std = normalisation(backbone)
        self.train_set = SegmentationFolder(
            data, "training", self.size, True, cfg.num_classes, seed=cfg.seed, mean=mean, std=std
        )
        slide = cfg.eval_mode == "slide"  # short side to the crop size, windows over the long side, one a batch
        self.val_set = SegmentationFolder(
            data, "validation", self.size, False, self.classes, keep_aspect=slide, mean=mean, std=std
        )
        self.model = Segmenter(backbone, cfg.head, self.classes, self.size).to(self.device)
        if self.rank == 0:
            echo(self.start_line())
        self.replicated = (
            distributed.replicate(self.model, self.device, sync_batchnorm=True) if self.world > 1 else None
        )
        total = self.plan_epochs(self.train_set)
        self.optimizer = optimizer_for(self.model, cfg)
        self.scheduler = PolyLRScheduler(  # timm warns that a one-step schedule does nothing; its step is the peak
            self.optimizer, t_initial=max(total, 2), power=1.0, warmup_t=cfg.warmup_steps, t_in_epochs=False
        )
        self.guard_steps(self.model, self.size)
        # one line per evaluation, its mIoU appended (and every --log-every steps off a terminal)
        self.progress_lines(total, on_terminal=True, write=echo)

    @property
    def classes(self) -> int:
        return self.train_set.num_classes

    def start_line(self) -> str:
        """What the run reads and how many classes it learns, before the first step."""
        cfg, train = self.cfg, self.train_set
        start = f"checkpoint '{cfg.checkpoint}'" if cfg.checkpoint else f"{cfg.backbone} from scratch"
        how = {
            "given": "--num-classes",
            "ADE20K's": "ADE20K's",
            "inferred": "the largest mask label + 1, 255 ignored; --num-classes to set it",
        }[train.classes_from]
        return (
            f"segmenting with {start} at {self.size} px, head {cfg.head}, on '{cfg.data}': {len(train)} training, "
            f"{len(self.val_set)} validation images, {self.classes} classes ({how}) -> {cfg.out}"
        )

    def plan_epochs(self, train_set) -> int:
        """Each rank takes its share of every global batch, in the order one process takes them; --max-steps,
        when given, sets the run's length and the epochs follow from it."""
        cfg = self.cfg
        self.sampler = EpochSampler(train_set, self.world, self.rank, seed=cfg.seed)
        local = cfg.batch_size // self.world
        self.steps_per_epoch = max(1, len(self.sampler) // local)  # a last short batch only when it is the one
        self.total = cfg.max_steps or cfg.epochs * self.steps_per_epoch
        self.epochs = math.ceil(self.total / self.steps_per_epoch)
        return self.total

    def loader(self, dataset, batch_size: int, sampler=None) -> torch.utils.data.DataLoader:
        """The training loader (with `sampler`), or an evaluation one: label maps at their own sizes, in lists."""
        drop_last = sampler is not None and len(sampler) > batch_size
        collate = None if sampler is not None else collate_eval
        return torch.utils.data.DataLoader(
            dataset, batch_size, sampler=sampler, num_workers=self.cfg.workers, drop_last=drop_last, collate_fn=collate
        )

    def loss_of(self, batch) -> torch.Tensor:
        images, masks = batch
        with autocast(self.device, self.dtype):
            return distributed.through(
                self.replicated,
                lambda x, y: F.cross_entropy(self.model(x), y, ignore_index=IGNORE),
                images,
                masks,
            )

    def run(self) -> dict:
        """Train the remaining epochs, saving OUT/segmenter.pt after each. SIGTERM or Ctrl-C stops the run at the
        next step; the last epoch's checkpoint is kept and `--resume` continues from it."""
        cfg = self.cfg
        try:
            with self.run_folder("segment", inputs=[cfg.checkpoint, None if self.generated else cfg.data]):
                if self.rank == 0:
                    write_json(self.out / "config.json", saved_settings(cfg))
                return self.train_and_report()
        finally:
            if self.generated:
                self.generated.cleanup()

    def train_epoch(self, loader) -> float:
        """One epoch's steps (fewer in the last when --max-steps ends it); their mean loss, as finetune's, skipped
        (non-finite) steps left out; NaN when no step was taken."""
        self.model.train()
        done = self.global_step - self.epoch * self.steps_per_epoch  # > 0: an epoch --max-steps cut, resumed longer
        self.sampler.set_position(self.epoch, done * (self.cfg.batch_size // self.world))
        self.lines.restart_clock()
        losses = []
        for batch, (images, masks) in enumerate(loader, start=done):
            if self.global_step >= self.total or batch >= self.steps_per_epoch:
                break
            if distributed.agreed_stop(self.stop, self.device, self.world):
                break
            batch_on_device = [(images.to(self.device), masks.to(self.device))]
            stats = self.optimizer_step(self.loss_of, batch_on_device, self.global_step + 1)
            self.global_step += 1
            if not stats.skipped:
                losses.append(stats.loss)
            self.lines.step(stats.loss, len(images) * self.world)
            # an epoch's last step (a --max-steps end included) has the epoch's line
            if (
                self.lines.step_due(self.global_step)
                and self.global_step % self.steps_per_epoch
                and self.global_step < self.total
            ):
                self.lines.step_line(self.epoch + 1, self.global_step, stats.lr)
        return sum(losses) / len(losses) if losses else math.nan

    def train_and_report(self) -> dict:
        cfg, writing = self.cfg, self.rank == 0
        slide = cfg.eval_mode == "slide"
        loader = self.loader(self.train_set, cfg.batch_size // self.world, self.sampler)
        val_loader = self.loader(distributed.shard(self.val_set, self.rank, self.world), 1 if slide else cfg.batch_size)
        self.lines.begin(self.global_step)
        with open_log(self.out / "log.jsonl", truncate=not cfg.resume) if writing else nullcontext() as log, self.stop:
            while self.epoch < self.epochs:
                loss = self.train_epoch(loader)
                if self.stop.requested:
                    return self.interrupted()
                self.epoch += 1
                metrics = evaluate(
                    self.model, val_loader, self.classes, self.size, cfg.eval_mode, self.device, self.dtype, self.world
                )
                lr = max(g["lr"] for g in self.optimizer.param_groups)  # the head's, under layer-wise decay
                row = {"epoch": self.epoch, "step": self.global_step, "loss": loss, **metrics, "lr": lr}
                self.history.append(row)
                check_finite_weights(self.model, self.global_step, self.out, checkpoint=self.resume_file)
                result = f"val mIoU {metrics[MIOU]:.2f}%, pixel acc {metrics[PIXEL_ACC]:.2f}%"
                self.lines.epoch_line(self.epoch, self.global_step, lr, result=result)
                if writing:
                    log.write(log_line(row))
                    self.save_checkpoint()
        results = {
            "config": cfg.to_dict(),
            "num_classes": self.classes,
            "img_size": self.size,
            "steps": self.global_step,
            "val_images": len(self.val_set),
            "eval_mode": cfg.eval_mode,
            "processes": self.world,
            "skipped_nonfinite_steps": self.nonfinite.skipped,
            **self.history[-1],
        }
        if writing:
            images, masks = next(iter(self.loader(self.val_set, 1 if slide else cfg.batch_size)))
            with autocast(self.device, self.dtype):
                maps = label_maps(
                    self.model, images.to(self.device), [m.shape[-2:] for m in masks], self.size, cfg.eval_mode
                )
            preds = [p.cpu() for p in maps]
            start = Path(cfg.checkpoint).parent.name if cfg.checkpoint else f"{cfg.backbone} from scratch"
            title = f"{start}, {cfg.head}, epoch {self.epoch}"
            save_figure(self.val_set.pixels(images), preds, masks, self.out / "predictions.png", title=title)
            write_json(self.out / "results.json", results)
        return results

    def save_checkpoint(self) -> Path:
        """OUT/segmenter.pt: the model and all `pretexts segment --resume` (`SegmentConfig.resuming`) reads back."""
        path = self.out / self.resume_file
        save_checkpoint(self.epoch_state("segmenter"), path)
        return path

    def load(self, path: Path) -> None:
        self.resume_epochs(path, "segmenter", SEGMENT_MAY_CHANGE)
        cut = self.global_step < self.epoch * self.steps_per_epoch  # --max-steps ended its last epoch early
        if cut and self.global_step < self.total:  # a longer --max-steps finishes that epoch first, and reports it
            self.epoch, self.finished_note = self.global_step // self.steps_per_epoch, None
            self.history = [row for row in self.history if row["epoch"] <= self.epoch]
            self.logged_step = self.epoch * self.steps_per_epoch


@keeps_caller_state
def run(cfg: SegmentConfig, log: Callable[[str], None] = stderr_line) -> dict:
    """Train a segmenter (`Segmentation(cfg).run()`): lock and claim OUT (never over another run or the inputs),
    or continue the run in it with --resume."""
    return Segmentation(cfg, log).run()
