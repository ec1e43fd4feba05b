"""`pretexts finetune`: fine-tune a pretrained backbone (or one from scratch) with a named recipe."""

from . import exit_if_interrupted, main, processes_note, rank_zero_echo, said_on_refusal, wrote_folder
from .config_file import build_config, config_options, options_from
from .help_sections import SectionedCommand

# a ViT from scratch: which positions it starts from, and the option that gives the other
FROM_SCRATCH_POSITIONS = {
    "sincos": " with the sin-cos position table (--positions learned: timm's)",
    "learned": " with timm's learned positions (--positions sincos: the table)",
}


@main.command("finetune", cls=SectionedCommand)
@options_from("pretexts.engine.evaluation.finetune_config:FinetuneConfig")
@config_options
def finetune_command(config, sets, **options) -> None:
    """Fine-tune with AdamW, layer-wise lr decay and label smoothing; --recipe paper adds Table A's RandAugment,
    mixup and cutmix for 100 epochs, --recipe small (the project's small-data recipe) none of them for 15, and the
    default auto picks by the data and says which in its first line. Reports top-1 on val/ each epoch and writes
    OUT/finetuned.pt (the final weights), OUT/best.pt (the best epoch's) and OUT/results.json. Without --data it
    fine-tunes on the checkpoint's pretraining data. --linear-probe runs MAE's linear-probe protocol instead: the
    backbone frozen, a BatchNorm and linear head trained with LARS for 90 epochs."""
    from pretexts.engine import FinetuneConfig, Finetuner
    from pretexts.engine.evaluation.linear_probe_protocol import PROTOCOL
    from pretexts.engine.evaluation.pretrained import describe_data
    from pretexts.engine.measures.reference import final_and_best_line
    from pretexts.engine.training import distributed
    from pretexts.engine.training.resume_config import FINETUNE_MAY_CHANGE, resumed_values
    from pretexts.engine.training.threads import threads_note, use_available_cpus

    from_file: list[str] = []  # what came from --config, said after the start line
    cfg = build_config(
        FinetuneConfig,
        options,
        config,
        sets,
        resume=lambda values: resumed_values(FinetuneConfig, values, "finetune", FINETUNE_MAY_CHANGE),
        echo=from_file.append,
    )
    threads = use_available_cpus()
    with said_on_refusal(from_file):  # an --out holding a run is refused before the start line
        finetuner = Finetuner(cfg)  # its per-epoch lines go to stderr, flushed (as train's off a terminal)
    cfg = finetuner.cfg  # the run's record: the recipe and the data as they resolved
    echo = rank_zero_echo(finetuner.rank)
    source = cfg.checkpoint or f"{cfg.backbone} from scratch{FROM_SCRATCH_POSITIONS.get(finetuner.start_positions, '')}"
    what = f"{PROTOCOL} of" if cfg.linear_probe else "fine-tuning"  # nobody reads a linear probe as a fine-tune
    echo(
        f"{what} {source} on {describe_data(cfg.data, finetuner.data_origin)}: "
        f"{train_images(finetuner)}, {len(finetuner.val_set)} val images, {len(finetuner.classes)} "
        f"classes, for {cfg.epochs} epoch{'' if cfg.epochs == 1 else 's'} -> {cfg.out}"
        f"{threads_note(finetuner.device, threads)}{processes_note(finetuner.world)}; {finetuner.recipe_note}"
    )
    for line in (finetuner.size_note, finetuner.pool_note, *from_file):
        if line:
            echo(line)
    try:
        results = finetuner.run()
    finally:
        distributed.teardown()
    exit_if_interrupted(results, f"{cfg.out}/checkpoint.pt", echo)
    echo(
        f"top-1 on val/ ({results['val_images']} images, {results['classes']} classes): final "
        f"{results['final_top1']:.2f}% (epoch {results['epochs']}, {cfg.out}/{results['weights']['final']}), "
        f"best {results['best_top1']:.2f}% (epoch {results['best_epoch']}, {cfg.out}/{results['weights']['best']})"
    )
    echo(final_and_best_line(results["reference"]))
    echo(wrote_folder(cfg.out))


def train_images(finetuner) -> str:
    """'320 train': the training images the data holds, as the `auto` recipe note counts them; of shards, also those
    an epoch takes where fewer (each reader yields whole batches, `streams.ImageStream`): '103 train images (96 each
    epoch: whole batches of 8)'."""
    shards = getattr(finetuner.train_set, "shards", None)
    if shards is None:
        return f"{len(finetuner.train_set)} train"
    epoch = len(finetuner.train_set) * finetuner.world  # every rank takes as many
    if epoch >= len(shards):
        return f"{len(shards)} train"
    return f"{len(shards)} train images ({epoch} each epoch: whole batches of {finetuner.cfg.batch_size})"
