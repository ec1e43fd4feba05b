"""`pretexts segment`: semantic segmentation fine-tuning (the paper's ADE20K transfer table)."""
import click

from . import main, single_process, written_files


@main.command("segment")
@click.option("--checkpoint", default=None, help="A checkpoint.pt written by `pretexts train`.")
@click.option("--from-scratch", is_flag=True, help="Random backbone (needs --backbone): the baseline.")
@click.option("--backbone", default=None, help="Backbone name with --from-scratch (vit_tiny, resnet18, ...).")
@click.option("--data", required=True,
              help="ADE20K folder (images/ + annotations/), generic folder (images/ + masks/), or 'generated'.")
@click.option("--out", default="runs/segment", show_default=True, help="Output folder.")
@click.option("--head", type=click.Choice(["upernet", "linear"]), default="upernet", show_default=True)
@click.option("--img-size", type=int, default=None, help="Crop size; default the checkpoint's size.")
@click.option("--num-classes", type=int, default=None, help="Default: 150 (ADE20K) or inferred from masks.")
@click.option("--epochs", type=int, default=10, show_default=True)
@click.option("--max-steps", type=int, default=None, help="Total iterations; overrides --epochs (160000 in MAE).")
@click.option("--batch-size", type=int, default=16, show_default=True)
@click.option("--lr", type=float, default=1e-4, show_default=True)
@click.option("--weight-decay", type=float, default=0.05, show_default=True)
@click.option("--layer-decay", type=float, default=0.65, show_default=True)
@click.option("--warmup-steps", type=int, default=0, show_default=True)
@click.option("--eval-mode", type=click.Choice(["whole", "slide"]), default="whole", show_default=True)
@click.option("--device", default="auto", show_default=True)
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--workers", type=int, default=0, show_default=True)
def segment_command(from_scratch, **options) -> None:
    """Fine-tune a backbone with a segmentation head; writes OUT/log.jsonl, results.json, predictions.png."""
    from pathlib import Path

    from engine.evaluation.segmentation.config import SegmentConfig
    from engine.evaluation.segmentation.generate import write_generated
    from engine.evaluation.segmentation.train import run
    from pretexts.errors import ParameterError

    single_process("segment")
    if from_scratch == (options["checkpoint"] is not None):
        raise ParameterError("give exactly one of --checkpoint CKPT and --from-scratch.")
    if options["data"] == "generated":
        options["data"] = str(write_generated(Path(options["out"]) / "generated-data"))
    results = run(SegmentConfig(**options), log=click.echo)
    click.echo(f"mIoU {results['miou']:.4f}  pixel acc {results['pixel_acc']:.4f}")
    click.echo(f"wrote {options['out']}/: {written_files(options['out'])}")
