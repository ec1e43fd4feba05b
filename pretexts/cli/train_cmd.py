"""`pretexts train`: pretrain a backbone with a method (the energy method by default) on one pretext task. The
selected method's own options (the energy method's --steps, --alpha, --grad-mode, ...) are options too, listed in
--help under "Method options"."""

import sys

import click

from ..errors import ParameterError
from . import main, parse_task_args, processes_note, rank_zero_echo, said_on_refusal, wrote_folder
from .config_file import build_config, config_options, options_from
from .help_sections import option
from .method_options import method_option_values, with_method_options

CONFIG = "pretexts.engine.training.config:PretrainConfig"


@main.command("train", cls=with_method_options(CONFIG))
@options_from(CONFIG)
@option(
    "--method-arg",
    "method_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="Any option of the method as KEY=VALUE, e.g. mask_ratio=0.75 for mae (`pretexts list --methods`); repeatable.",
    section="method",
)
@option(
    "--task-arg",
    "task_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="A parameter of the task (`pretexts list -v`); repeatable.",
    section="model",
)
@option("--preset", default=None, help="A named preset of the task (`pretexts list -v`).", section="model")
@config_options
def train_command(task_args, method_args, preset, config, sets, **options) -> None:
    """Pretrain a backbone on one pretext task with one method: the energy method by default (the paper's: corrupt,
    restore by gradient steps down a learned energy, learn from the error), or ae, mae, simmim or a plugin's.

    Writes OUT/checkpoint.pt, config.json, log.jsonl, figures and results.json. "Method options" are the selected
    method's: `pretexts train --method mae --help` lists MAE's."""
    from pretexts.engine import PretrainConfig, Pretrainer
    from pretexts.engine.methods.base import resolved_line
    from pretexts.engine.training import distributed
    from pretexts.engine.training.config import with_method_args
    from pretexts.engine.training.resume_config import PRETRAIN_MAY_CHANGE, resumed_values
    from pretexts.engine.training.threads import threads_note, use_available_cpus

    args = parse_task_args(task_args)
    if preset is not None:
        args["preset"] = preset
    given, flags = (
        parse_task_args(method_args, "--method-arg"),
        method_option_values(click.get_current_context(), options),
    )
    if twice := [key for key in flags if key in given and str(given[key]) != str(flags[key])]:
        key = twice[0]
        raise ParameterError(
            f"--{key.replace('_', '-')} {flags[key]} and --method-arg {key}={given[key]} set the same option to two "
            f"values; give one of them."
        )
    method_values = {**given, **flags}
    from_file: list[str] = []  # what came from --config, said after the start line
    cfg = build_config(
        PretrainConfig,
        {"task_args": args, "method_args": method_values, **options},
        config,
        sets,
        merge=("task_args", "method_args"),
        loose=with_method_args,
        resume=lambda values: resumed_values(PretrainConfig, values, None, PRETRAIN_MAY_CHANGE),
        echo=from_file.append,
    )
    threads = use_available_cpus()
    with said_on_refusal(from_file):  # an --out holding a run is refused before the start line
        trainer = Pretrainer(cfg)
    echo = rank_zero_echo(trainer.rank)
    echo(
        f"pretraining {cfg.backbone} on {trainer.method.corruption()} with method '{cfg.method}', data "
        f"'{cfg.data}' ({image_counts(trainer)}), for {cfg.epochs} epoch{'' if cfg.epochs == 1 else 's'} -> "
        f"{cfg.out}" + threads_note(trainer.device, threads) + processes_note(trainer.world)
    )
    for line in (*from_file, trainer.compile_choice.describe(), resolved_line(trainer.method), trainer.schedule_note):
        if line:
            echo(line)
    try:
        results = trainer.run()
    finally:
        distributed.teardown()
    if "interrupted" in results:
        echo(
            f"stopped by {results['interrupted']} after step {results['optimizer_steps']}; saved "
            f"{cfg.out}/checkpoint.pt. Continue with the same command and --resume.",
            err=True,
        )
        sys.exit(results["exit_code"])
    if results.get("skipped_nonfinite_steps"):
        echo(f"skipped {results['skipped_nonfinite_steps']} steps with a NaN or infinite loss or gradient.", err=True)
    if "held_out" in results:
        echo(trainer.held_out_now().format())
    echo(wrote_folder(cfg.out))


def image_counts(trainer) -> str:
    """'130 train, 7 val images' for the start line: of shards, each split's whole count (a rank streams its share
    of train; held out are val's first), saying when the val images are fewer than --eval-images asks."""
    shards = getattr(trainer.train_set, "shards", None)
    train = len(shards) if shards is not None else len(trainer.train_set)
    if trainer.val_set is None:
        return f"{train} train image{'' if train == 1 else 's'}, no val"
    held, asked = len(trainer.val_set), trainer.cfg.eval_images
    val = getattr(trainer.val_set.source, "total", held)
    fewer = f", fewer than --eval-images {asked}" if 0 < held < asked else ""
    return f"{train} train, {val} val image{'' if val == 1 else 's'}{fewer}"
