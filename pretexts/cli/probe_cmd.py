"""`pretexts probe`: frozen-feature evaluation (linear probe, the paper's MLP head, kNN)."""
import click

from . import main, single_process
from .config_file import build_config, config_options


@main.command("probe")
@click.option("--checkpoint", default=None, help="A checkpoint.pt written by `pretexts train` (required, here "
              "or in --config).")
@click.option("--data", default=None, help="'sample' (embedded, default) or a folder with train/ and val/ class folders.")
@click.option("--method", "methods", multiple=True, type=click.Choice(["linear", "mlp", "knn"]),
              help="linear, mlp (3 layers, ReLU) or knn; repeatable, features are extracted once. Default linear.")
@click.option("--epochs", type=int, default=None, help="Head training epochs on the cached features. Default 100.")
@click.option("--batch-size", type=int, default=None, help="Default 256.")
@click.option("--lr", type=float, default=None, help="AdamW lr of the head. Default 1e-3.")
@click.option("--weight-decay", type=float, default=None, help="Default 0.")
@click.option("--hidden", type=int, default=None, help="Width of the MLP head's hidden layers. Default 768 (paper).")
@click.option("--knn-k", "knn_k", multiple=True, type=int, help="Neighbours; repeatable. Default 20 and 200.")
@click.option("--knn-temperature", type=float, default=None, help="Votes weigh exp(cosine / T). Default 0.07.")
@click.option("--crop-pct", type=float, default=None, help="Evaluation centre crop fraction; default 0.875.")
@click.option("--seed", type=int, default=None)
@click.option("--workers", type=int, default=None, help="Data loader worker processes. Default 2.")
@click.option("--quiet", is_flag=True, default=None, help="No progress bars (off anyway when the output is not "
              "a terminal).")
@click.option("--device", default=None, help="auto, cpu, cuda, cuda:1, ...")
@click.option("--out", default=None, help="Output folder. Default runs/probe.")
@config_options
def probe_command(config, sets, **options) -> None:
    """Evaluate a pretrained backbone's frozen features; writes OUT/results.json."""
    single_process("probe")
    from engine import ProbeConfig, run_probe

    cfg = build_config(ProbeConfig, options, config, sets)
    run_probe(cfg, echo=click.echo)
    click.echo(f"wrote {cfg.out}/results.json")
