"""`pretexts probe`: frozen-feature evaluation (linear probe, the paper's MLP head, kNN)."""
import click

from . import main, single_process, written_files
from .config_file import build_config, config_options, defaults_from


@main.command("probe", cls=defaults_from("engine.evaluation.probe:ProbeConfig"))
@click.option("--checkpoint", default=None, help="A checkpoint.pt written by `pretexts train` (required, here "
              "or in --config).")
@click.option("--data", default=None, help="'sample' (embedded, default) or a folder with train/ and val/ class folders.")
@click.option("--probe", "probes", multiple=True, metavar="NAME",
              help="linear, mlp (3 layers, ReLU) or knn; repeatable, features are extracted once. "
              "(In train, `--method` names the pretraining method.)")
@click.option("--epochs", type=int, default=None, help="Head training epochs on the cached features.")
@click.option("--batch-size", type=int, default=None, help="Batch of cached features.")
@click.option("--lr", type=float, default=None, help="AdamW lr of the head.")
@click.option("--weight-decay", type=float, default=None, help="AdamW weight decay of the head.")
@click.option("--hidden", type=int, default=None, help="Width of the MLP head's hidden layers (paper).")
@click.option("--knn-k", "knn_k", multiple=True, type=int, help="Neighbours; repeatable.")
@click.option("--knn-temperature", type=float, default=None, help="Votes weigh exp(cosine / T).")
@click.option("--crop-pct", type=float, default=None, help="Evaluation centre crop fraction.")
@click.option("--seed", type=int, default=None)
@click.option("--workers", type=int, default=None, help="Data loader worker processes.")
@click.option("--quiet", is_flag=True, default=None, help="No progress bars (off anyway when the output is not "
              "a terminal).")
@click.option("--device", default=None, help="auto, cpu, cuda, cuda:1, ...")
@click.option("--out", default=None, help="Output folder.")
@config_options
def probe_command(config, sets, **options) -> None:
    """Evaluate a pretrained backbone's frozen features; writes OUT/results.json."""
    single_process("probe")
    from engine import ProbeConfig, run_probe

    cfg = build_config(ProbeConfig, options, config, sets)
    run_probe(cfg, echo=click.echo)
    click.echo(f"wrote {cfg.out}/: {written_files(cfg.out)}")
