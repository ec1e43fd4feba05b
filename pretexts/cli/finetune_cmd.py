"""`pretexts finetune`: fine-tune a pretrained backbone (or one from scratch) with the paper's recipe."""
import sys

import click

from . import main, single_process, written_files
from .config_file import build_config, config_options, defaults_from, options_from


@main.command("finetune", cls=defaults_from("pretexts.engine.evaluation.finetune_config:FinetuneConfig"))
@options_from("pretexts.engine.evaluation.finetune_config:FinetuneConfig")
@config_options
def finetune_command(config, sets, **options) -> None:
    """Fine-tune with AdamW, layer-wise lr decay, RandAugment, mixup/cutmix and label smoothing (paper, Table A);
    reports top-1 on val/ each epoch and writes OUT/finetuned.pt and OUT/results.json."""
    single_process("finetune")
    from pretexts.engine import FinetuneConfig, Finetuner
    from pretexts.engine.training.resume_config import FINETUNE_MAY_CHANGE, resumed_values

    cfg = build_config(FinetuneConfig, options, config, sets,
                       resume=lambda values: resumed_values(FinetuneConfig, values, "finetune", FINETUNE_MAY_CHANGE))
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
