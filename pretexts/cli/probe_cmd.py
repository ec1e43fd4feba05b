"""`pretexts probe`: frozen-feature evaluation (linear probe, the paper's MLP head, kNN)."""
import click

from . import main, single_process, written_files
from .config_file import build_config, config_options, defaults_from, options_from


@main.command("probe", cls=defaults_from("pretexts.engine.evaluation.probe_config:ProbeConfig"))
@options_from("pretexts.engine.evaluation.probe_config:ProbeConfig")
@config_options
def probe_command(config, sets, **options) -> None:
    """Evaluate a pretrained backbone's frozen features; writes OUT/results.json."""
    single_process("probe")
    from pretexts.engine import ProbeConfig, run_probe

    cfg = build_config(ProbeConfig, options, config, sets)
    run_probe(cfg, echo=click.echo)
    click.echo(f"wrote {cfg.out}/: {written_files(cfg.out)}")
