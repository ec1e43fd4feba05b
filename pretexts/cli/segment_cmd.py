"""`pretexts segment`: semantic segmentation fine-tuning (the paper's ADE20K transfer table)."""

from . import exit_if_interrupted, main, rank_zero_echo, wrote_folder
from .config_file import build_config, config_options, options_from
from .help_sections import SectionedCommand, option


@main.command("segment", cls=SectionedCommand)
@options_from("pretexts.engine.evaluation.segmentation.config:SegmentConfig")
@option("--from-scratch", is_flag=True, help="Random backbone (needs --backbone): the baseline.", section="model")
@config_options
def segment_command(from_scratch, config, sets, **options) -> None:
    """Fine-tune a backbone with a segmentation head; writes OUT/log.jsonl, results.json, predictions.png."""
    from pretexts.engine.evaluation.segmentation.config import SegmentConfig
    from pretexts.engine.evaluation.segmentation.train import Segmentation
    from pretexts.engine.training import distributed
    from pretexts.engine.training.resume_config import SEGMENT_MAY_CHANGE, resumed_values
    from pretexts.errors import ParameterError

    def resumed(values):
        return resumed_values(SegmentConfig, values, "segmenter", SEGMENT_MAY_CHANGE, Segmentation.resume_file)

    echo = rank_zero_echo(distributed.launched_rank())
    # what came from --config is said first: the run's own lines are its progress, on stderr
    cfg = build_config(SegmentConfig, options, config, sets, resume=resumed, echo=echo)
    # a resumed run keeps its start (a checkpoint, or none: from scratch); a new run names one
    if from_scratch == (cfg.checkpoint is not None) and not (cfg.resume and not from_scratch):
        raise ParameterError("give exactly one of --checkpoint CKPT and --from-scratch.")
    try:
        results = Segmentation(cfg).run()  # its per-epoch lines go to stderr, flushed (as train's off a terminal)
    finally:
        distributed.teardown()
    exit_if_interrupted(results, f"{cfg.out}/{Segmentation.resume_file}", echo)
    echo(
        f"on {results['val_images']} validation images ({results['num_classes']} classes, {results['eval_mode']} "
        f"eval): mIoU {results['miou_percent']:.2f}%, pixel accuracy {results['pixel_acc_percent']:.2f}%"
    )
    echo(wrote_folder(cfg.out))
