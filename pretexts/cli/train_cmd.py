"""`pretexts train`: pretrain a backbone with the energy method on one pretext task."""
import sys

import click

from . import main, parse_task_args, written_files
from .config_file import build_config, config_options, defaults_from


@main.command("train", cls=defaults_from("engine.training.config:PretrainConfig"))
@click.option("--task", default=None, help="Pretext task (see `pretexts list`).")
@click.option("--method", default=None, help="energy (the paper), ae (the autoencoder baseline) or mae "
              "(masked autoencoder, ViT only).")
@click.option("--method-arg", "method_args", multiple=True, metavar="KEY=VALUE",
              help="An option of the method, e.g. mask_ratio=0.75 for mae (see `pretexts list --methods`); "
              "repeatable.")
@click.option("--task-arg", "task_args", multiple=True, metavar="KEY=VALUE", help="A task parameter; repeatable.")
@click.option("--preset", default=None, help="A named preset of the task (see `pretexts list -v`).")
@click.option("--backbone", default=None, help="Alias (vit_tiny, vit_small, swin_t, resnet18, ...) or timm name.")
@click.option("--data", default=None, help="'sample' (embedded, default), 'synthetic', an ImageFolder dir "
              "or a CIFAR-10 folder.")
@click.option("--dataset", default=None, help="A timm create_dataset name (torch/cifar100, torch/mnist, "
              "hfds/NAME) whose files lie in --data; nothing is downloaded.")
@click.option("--img-size", type=int, default=None, help="Training resolution.")
@click.option("--epochs", type=int, default=None)
@click.option("--batch-size", type=int, default=None, help="Global batch size.")
@click.option("--accum-iter", type=int, default=None, help="Gradient accumulation: run each step's batch as this "
              "many micro-batches (the memory of batch / K images, the step of the whole batch).")
@click.option("--steps", type=int, default=None, help="Restoration steps N (paper: 2).")
@click.option("--recipe", default=None, help="Optimiser defaults: 'fast' (default: base lr 1e-3, alpha lr x400) "
              "or 'paper' (Table A exactly: base lr 1e-4, alpha lr x1). Explicit options win.")
@click.option("--lr", type=float, default=None, help="Peak lr. Default base lr x batch / 256 (paper).")
@click.option("--base-lr", type=float, default=None, help="lr per 256 images. Default: the recipe's.")
@click.option("--warmup-epochs", type=float, default=None)
@click.option("--min-lr", type=float, default=None, help="End of the cosine decay.")
@click.option("--schedule", default=None, help="After the warm-up: cosine (decay to --min-lr) or constant. "
              "Default: the recipe's.")
@click.option("--weight-decay", type=float, default=None, help="AdamW's (norms, biases and alpha get none). "
              "Default: the recipe's.")
@click.option("--alpha", type=float, default=None, help="Initial restoration step size. Default: the recipe's.")
@click.option("--alpha-lr-scale", type=float, default=None, help="alpha's lr relative to the network's. "
              "Default: the recipe's.")
@click.option("--head-init-std", type=float, default=None, help="Std of the energy head's initial weights.")
@click.option("--energy-scale", type=float, default=None, help="Multiplier of the energy.")
@click.option("--loss", type=click.Choice(["mse", "smooth_l1"]), default=None)
@click.option("--amp", type=click.Choice(["auto", "bf16", "fp16", "off"]), default=None)
@click.option("--clip-grad", type=float, default=None, help="Clip the gradient norm to this value.")
@click.option("--seed", type=int, default=None)
@click.option("--workers", type=int, default=None, help="Data loader worker processes.")
@click.option("--quiet", is_flag=True, default=None, help="No progress bars (off anyway when the output is not "
              "a terminal).")
@click.option("--device", default=None, help="auto, cpu, cuda, cuda:1, ...")
@click.option("--max-steps-per-epoch", type=int, default=None, help="Cap the optimiser steps of each epoch.")
@click.option("--out", default=None, help="Output folder.")
@click.option("--resume", is_flag=False, flag_value="auto", default=None,
              help="Continue from OUT/checkpoint.pt, or from the checkpoint given.")
@click.option("--force", is_flag=True, default=None, help="Start over in an --out that already holds a run "
              "(its checkpoint and log are removed).")
@click.option("--grad-mode", type=click.Choice(["exact", "finite-difference"]), default=None,
              help="exact: double backward (paper). finite-difference: two first-order passes per step, "
              "allows fused attention and --compile; smooth backbones only (ViT, Swin, ConvNeXt).")
@click.option("--fd-delta", type=float, default=None, help="Finite-difference perturbation (RMS per element). "
              "")
@click.option("--compile", is_flag=False, flag_value="inductor", default=None, metavar="[BACKEND]",
              help="torch.compile the backbone (default backend inductor); finite-difference mode only.")
@click.option("--grad-checkpointing", is_flag=True, default=None, help="Recompute activations in the "
              "backward (non-reentrant): less memory, more time.")
@click.option("--channels-last", is_flag=True, default=None, help="NHWC memory format (convolutional backbones).")
@click.option("--betas", type=(float, float), default=None, metavar="B1 B2", help="AdamW's betas. Default: the "
              "recipe's.")
@click.option("--eval-every", type=int, default=None, help="Also log the held-out error every this many steps.")
@click.option("--eval-images", type=int, default=None, help="Held-out images for the restoration-error report.")
@click.option("--figure-images", type=int, default=None, help="Images in each epoch's restoration figure.")
@click.option("--logger", default=None, help="Also log scalars, held-out error and figures to tensorboard "
              "(OUT/tensorboard) or wandb (offline unless WANDB_MODE=online).jsonl) alone.")
@click.option("--skip-nonfinite", is_flag=True, default=None,
              help="Skip (and count) a step whose loss is NaN or inf, instead of stopping the run.")
@config_options
def train_command(task_args, method_args, preset, config, sets, **options) -> None:
    """Pretrain a backbone: corrupt, restore by gradient steps down the energy, learn from the error."""
    from engine import PretrainConfig, Pretrainer, format_held_out
    from engine.training import distributed

    args = parse_task_args(task_args)
    if preset is not None:
        args["preset"] = preset
    cfg = build_config(PretrainConfig, {"task_args": args, "method_args": parse_task_args(method_args, "--method-arg"),
                                        **options}, config, sets, merge=("task_args", "method_args"))
    trainer = Pretrainer(cfg)
    echo = click.echo if trainer.rank == 0 else lambda *args, **kwargs: None  # under torchrun rank 0 speaks
    echo(f"pretraining {cfg.backbone} on {trainer.method.corruption()} with data '{cfg.data}' for {cfg.epochs} epochs "
         f"-> {cfg.out}")
    try:
        results = trainer.run()
    finally:
        distributed.teardown()
    if "interrupted" in results:
        echo(f"stopped by {results['interrupted']} after step {results['optimizer_steps']}; saved "
             f"{cfg.out}/checkpoint.pt. Continue with the same command and --resume.", err=True)
        sys.exit(results["exit_code"])
    if results.get("skipped_nonfinite_steps"):
        echo(f"skipped {results['skipped_nonfinite_steps']} steps with a NaN or infinite loss.", err=True)
    if "held_out" in results:
        echo(format_held_out(results["held_out"]))
    echo(f"wrote {cfg.out}/: {written_files(cfg.out)}")
