"""`pretexts finetune`: fine-tune a pretrained backbone (or one from scratch) with the paper's recipe."""
import sys

import click

from . import main, single_process, written_files
from .config_file import build_config, config_options, defaults_from


@main.command("finetune", cls=defaults_from("engine.evaluation.finetune_config:FinetuneConfig"))
@click.option("--checkpoint", default=None, help="A checkpoint.pt written by `pretexts train`.")
@click.option("--from-scratch", is_flag=True, default=None, help="Same recipe on a random backbone (the baseline).")
@click.option("--backbone", default=None, help="With --from-scratch: alias (resnet18, vit_tiny, ...) or timm name.")
@click.option("--img-size", type=int, default=None, help="With --from-scratch. Default 32; a checkpoint's own otherwise.")
@click.option("--data", default=None, help="'sample' (embedded, default) or a folder with train/ and val/ class folders.")
@click.option("--label-fraction", type=float, default=None,
              help="Fine-tune on a class-balanced seeded subset: 0.01 or 0.1 (the paper's semi-supervised rows).")
@click.option("--epochs", type=int, default=None, help="Fine-tuning epochs (paper, Table A).")
@click.option("--warmup-epochs", type=float, default=None, help="Linear warm-up epochs.")
@click.option("--batch-size", type=int, default=None, help="Batch size of each optimiser step.")
@click.option("--accum-iter", type=int, default=None, help="Gradient accumulation: run each step's batch as this "
              "many micro-batches (the memory of batch / K images, the step of the whole batch).")
@click.option("--lr", type=float, default=None, help="Peak lr. Default base lr x batch / 256.")
@click.option("--base-lr", type=float, default=None, help="lr per 256 images (paper, Table A).")
@click.option("--min-lr", type=float, default=None, help="End of the cosine decay.")
@click.option("--weight-decay", type=float, default=None, help="AdamW's weight decay.")
@click.option("--layer-decay", type=float, default=None, help="Layer-wise lr decay; 1 turns it off.")
@click.option("--drop-path", type=float, default=None, help="Stochastic depth rate.")
@click.option("--randaug", default=None, help="timm RandAugment policy; default rand-m9-mstd0.5, 'none' turns it off.")
@click.option("--crop-min-scale", type=float, default=None, help="RandomResizedCrop's smallest area.")
@click.option("--crop-pct", type=float, default=None, help="Evaluation centre crop fraction.")
@click.option("--smoothing", type=float, default=None, help="Label smoothing.")
@click.option("--mixup", type=float, default=None, help="Mixup alpha; 0 turns it off.")
@click.option("--cutmix", type=float, default=None, help="CutMix alpha; 0 turns it off.")
@click.option("--mixup-prob", type=float, default=None, help="Share of batches mixed (timm Mixup's prob).")
@click.option("--mixup-switch-prob", type=float, default=None, help="Share of mixed batches that use CutMix when "
              "both are on.")
@click.option("--betas", type=(float, float), default=None, metavar="B1 B2", help="AdamW's betas.")
@click.option("--clip-grad", type=float, default=None, help="Clip the gradient norm to this value.")
@click.option("--amp", type=click.Choice(["auto", "bf16", "fp16", "off"]), default=None)
@click.option("--seed", type=int, default=None)
@click.option("--workers", type=int, default=None, help="Data loader worker processes.")
@click.option("--quiet", is_flag=True, default=None, help="No progress bars (off anyway when the output is not "
              "a terminal).")
@click.option("--device", default=None, help="auto, cpu, cuda, cuda:1, ...")
@click.option("--max-steps-per-epoch", type=int, default=None, help="Cap the optimiser steps of each epoch.")
@click.option("--out", default=None, help="Output folder.")
@click.option("--force", is_flag=True, default=None, help="Start over in an --out that already holds a run "
              "(its checkpoint and log are removed).")
@click.option("--resume", is_flag=False, flag_value="auto", default=None,
              help="Continue from OUT/checkpoint.pt (saved after each epoch), or from the checkpoint given.")
@config_options
def finetune_command(config, sets, **options) -> None:
    """Fine-tune with AdamW, layer-wise lr decay, RandAugment, mixup/cutmix and label smoothing (paper, Table A);
    reports top-1 on val/ each epoch and writes OUT/finetuned.pt and OUT/results.json."""
    single_process("finetune")
    from engine import FinetuneConfig, Finetuner

    cfg = build_config(FinetuneConfig, options, config, sets)
    finetuner = Finetuner(cfg, echo=click.echo)
    source = cfg.checkpoint or f"{cfg.backbone} from scratch"
    click.echo(f"fine-tuning {source} on '{cfg.data}' ({len(finetuner.train_set)} images) for {cfg.epochs} epochs "
               f"-> {cfg.out}")
    results = finetuner.run()
    if "interrupted" in results:
        kept = (f"{cfg.out}/checkpoint.pt holds epoch {results['epochs']}. Continue with the same command and "
                f"--resume." if results["epochs"] else "no epoch had finished, so there is nothing to resume.")
        click.echo(f"stopped by {results['interrupted']} in epoch {results['epochs'] + 1}; {kept}", err=True)
        sys.exit(results["exit_code"])
    click.echo(f"val top-1: final {results['final_top1']:.2f}%, best {results['best_top1']:.2f}% "
               f"({results['classes']} classes)")
    click.echo(f"wrote {cfg.out}/: {written_files(cfg.out)}")
