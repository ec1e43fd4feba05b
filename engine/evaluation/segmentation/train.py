"""Fine-tune backbone + head on a segmentation folder; mIoU and pixel accuracy on validation each epoch.

Under torchrun each rank trains on its share of every global batch (`--batch-size`) with DDP and scores its shard
of the validation images; the crops are seeded by (seed, epoch, index), so the ranks take one process's steps."""

import json
from contextlib import nullcontext
from pathlib import Path

import torch
import torch.nn.functional as F
from timm.optim import create_optimizer_v2
from timm.optim._param_groups import param_groups_layer_decay
from timm.scheduler import PolyLRScheduler

from pretexts.engine.data.loader import EpochSampler
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.training import distributed
from pretexts.engine.training.arithmetic import use_cuda_arithmetic
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.nonfinite import NonFiniteGuard, check_finite_weights
from pretexts.engine.training.optimizer_step import OptimizerStep
from pretexts.engine.training.precision import amp_dtype, autocast, grad_scaler
from pretexts.engine.training.preflight import resolve_device
from pretexts.engine.training.progress import ProgressLines, stderr_line
from pretexts.engine.training.run_folder import RunLock, claim_output_dir, open_log, write_json
from pretexts.errors import ParameterError

from .config import SegmentConfig
from .data import SegmentationFolder, refuse_shards
from .figure import save_figure
from .generate import write_generated
from .heads import Segmenter
from .metrics import IGNORE, MIOU, PIXEL_ACC, confusion, scores


def optimizer_for(model: Segmenter, cfg: SegmentConfig) -> torch.optim.Optimizer:
    """AdamW; backbone layers scaled by layer_decay ** depth (timm's groups), head and pyramid at full lr."""
    groups = param_groups_layer_decay(model.features.backbone, cfg.weight_decay, layer_decay=cfg.layer_decay)
    rest = [p for n, p in model.named_parameters() if not n.startswith("features.backbone.")]
    groups.append({"params": rest, "weight_decay": cfg.weight_decay, "lr_scale": 1.0})
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


def evaluate(model, loader, num_classes: int, crop: int, mode: str, device, dtype=None, world: int = 1) -> dict:
    """mIoU and pixel accuracy; under torchrun each rank scores its shard and the confusion matrices are summed."""
    model.eval()
    distributed.share_buffers(model, world)
    conf = torch.zeros(num_classes, num_classes, dtype=torch.long)
    for images, masks in loader:
        with autocast(device, dtype):
            pred = predict(model, images.to(device), crop, mode).argmax(1).cpu()
        conf += confusion(pred, masks, num_classes)
    return scores(distributed.sum_over_ranks(conf, device, world))


def run(cfg: SegmentConfig, log=stderr_line) -> dict:
    """Lock and claim OUT (never over another run or the inputs), then train; 'generated' data is written into OUT.
    Under torchrun rank 0 alone claims and writes; the others wait for it before reading the data."""
    refuse_shards(cfg.data)  # before OUT is claimed: a refused run leaves nothing behind
    rank, world, device = distributed.setup(resolve_device(cfg.device), cfg.batch_size)
    use_cuda_arithmetic(device, cfg.tf32, cfg.cudnn_benchmark)
    with RunLock(cfg.out, "segment") if rank == 0 else nullcontext():
        if rank == 0:
            claim_output_dir(cfg.out, None, cfg.force, inputs=[cfg.checkpoint, cfg.data], resumable=False)
        if cfg.data == "generated":
            generated = Path(cfg.out) / "generated-data"
            if rank == 0:
                write_generated(generated)
            distributed.barrier(world)
            cfg.data = str(generated)
        return train_segmenter(cfg, log, rank, world, device)


def train_segmenter(cfg: SegmentConfig, log=stderr_line, rank: int = 0, world: int = 1, device=None) -> dict:
    if cfg.checkpoint is None and cfg.backbone is None:
        raise ParameterError("give --checkpoint CKPT, or --from-scratch with --backbone NAME.")
    if cfg.head not in ("upernet", "linear"):
        raise ParameterError(f"unknown head '{cfg.head}'; use upernet or linear.")
    torch.manual_seed(cfg.seed)
    device = device or resolve_device(cfg.device)
    backbone, saved = create_classifier(
        cfg.checkpoint, None if cfg.checkpoint else cfg.backbone, None if cfg.checkpoint else cfg.img_size
    )
    size = cfg.img_size or saved.get("img_size") or 32
    train_set = SegmentationFolder(cfg.data, "training", size, True, cfg.num_classes, seed=cfg.seed)
    slide = cfg.eval_mode == "slide"  # short side to the crop size, windows over the long side, one image a batch
    val_set = SegmentationFolder(cfg.data, "validation", size, False, train_set.num_classes, keep_aspect=slide)
    k = train_set.num_classes
    model = Segmenter(backbone, cfg.head, k, size).to(device)
    replicated = distributed.replicate(model, device, sync_batchnorm=True) if world > 1 else None
    # each rank takes its share of every global batch, in the order one process takes them
    sampler = EpochSampler(train_set, world, rank, seed=cfg.seed)
    local_batch = cfg.batch_size // world
    loader = torch.utils.data.DataLoader(
        train_set, local_batch, sampler=sampler, num_workers=cfg.workers, drop_last=len(sampler) > local_batch
    )
    val_loader = torch.utils.data.DataLoader(
        distributed.shard(val_set, rank, world), 1 if slide else cfg.batch_size, num_workers=cfg.workers
    )
    per_epoch = len(loader)
    total = cfg.max_steps or cfg.epochs * per_epoch
    epochs = -(-total // per_epoch)
    opt = optimizer_for(model, cfg)
    sched = PolyLRScheduler(opt, t_initial=total, power=1.0, warmup_t=cfg.warmup_steps, t_in_epochs=False)
    out = Path(cfg.out)
    dtype = amp_dtype(cfg.amp, device)
    # the same step as pretraining and fine-tuning, with its clipping and non-finite policy
    nonfinite = NonFiniteGuard(cfg.skip_nonfinite, out, checkpoint="segmenter.pt")
    optimizer_step = OptimizerStep(
        model, opt, sched, grad_scaler(device, dtype), nonfinite, cfg.clip_grad, replicated, world
    )

    def loss_of(batch) -> torch.Tensor:
        images, masks = batch
        with autocast(device, dtype):
            return distributed.through(
                replicated, lambda x, y: F.cross_entropy(model(x), y, ignore_index=IGNORE), images, masks
            )

    writing = rank == 0
    if writing:
        write_json(out / "config.json", cfg.to_dict())
    step, history, loss = 0, [], float("nan")
    # one line per evaluation, its mIoU appended (and every --log-every steps off a terminal)
    lines = ProgressLines(
        epochs, total, quiet=cfg.quiet, enabled=writing, every=cfg.log_every, on_terminal=True, write=log
    )
    with open_log(out / "log.jsonl", truncate=True) if writing else nullcontext() as log_file:
        for epoch in range(epochs):
            model.train()
            sampler.set_position(epoch)
            lines.restart_clock()
            for images, masks in loader:
                if step >= total:
                    break
                stats = optimizer_step(loss_of, [(images.to(device), masks.to(device))], step + 1)
                step += 1
                loss = loss if stats.skipped else stats.loss  # the last step taken
                lines.step(stats.loss, len(images) * world)
                if lines.step_due(step) and step % per_epoch and step < total:
                    lines.step_line(epoch + 1, step, stats.lr)
            metrics = evaluate(model, val_loader, k, size, cfg.eval_mode, device, dtype, world)
            row = {"epoch": epoch + 1, "step": step, "loss": loss, **metrics}
            history.append(row)
            check_finite_weights(model, step, out, checkpoint="segmenter.pt")
            lines.epoch_line(
                epoch + 1,
                step,
                max(g["lr"] for g in opt.param_groups),
                result=f"val mIoU {metrics[MIOU]:.2f}%, pixel acc {metrics[PIXEL_ACC]:.2f}%",
            )
            if writing:
                log_file.write(json.dumps(row) + "\n")
                save_checkpoint(
                    {"kind": "segmenter", "model": model.state_dict(), "config": cfg.to_dict(), "epoch": epoch + 1},
                    out / "segmenter.pt",
                )
    results = {
        "config": cfg.to_dict(),
        "num_classes": k,
        "img_size": size,
        "steps": step,
        "val_images": len(val_set),
        "eval_mode": cfg.eval_mode,
        "processes": world,
        "skipped_nonfinite_steps": nonfinite.skipped,
        **history[-1],
    }
    if writing:
        images, masks = next(iter(torch.utils.data.DataLoader(val_set, 1 if slide else cfg.batch_size)))
        with autocast(device, dtype):
            pred = predict(model, images.to(device), size, cfg.eval_mode).argmax(1).cpu()
        save_figure(images, pred, masks, out / "predictions.png")
        write_json(out / "results.json", results)
    return results
