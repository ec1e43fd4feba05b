"""`pretexts probe`: frozen-feature evaluation (linear probe, the paper's MLP head, kNN, a plugin's probes)."""

from . import main, parse_task_args, processes_note, rank_zero_echo, wrote_folder
from .config_file import build_config, config_options, options_from
from .help_sections import SectionedCommand, option, param_help

PROBE_CONFIG = "pretexts.engine.evaluation.probe_config"


def builtin_probe_options(command):
    """An option for each parameter of the built-in probes (`--epochs`, ..., `--knn-temperature`), the same as
    `--probe-arg KEY=VALUE`; read from probe_config.py, which imports no torch."""
    from pretexts.engine.evaluation.probe_config import BUILTIN_PROBE_PARAMS

    for key, param in reversed(BUILTIN_PROBE_PARAMS.items()):
        many = isinstance(param.default, tuple)
        settings = param_help(param)
        if many:
            settings["help"] = settings["help"].removesuffix(".") + "; repeatable."
        command = option(
            "--" + key.replace("_", "-"),
            key,
            type=type(param.default[0]) if many else param.kind,
            default=None,
            multiple=many,
            section="probes",
            **settings,
        )(command)
    return command


@main.command("probe", cls=SectionedCommand)
@options_from(f"{PROBE_CONFIG}:ProbeConfig")
@option(
    "--probe-arg",
    "probe_args",
    multiple=True,
    metavar="KEY=VALUE",
    help="A parameter of the probes run (see `pretexts list --probes -v`); repeatable.",
    section="probes",
)
@builtin_probe_options
@config_options
def probe_command(probe_args, config, sets, **options) -> None:
    """Evaluate a backbone's frozen features: a pretraining checkpoint, an export, a timm model's weights on disk,
    or a seeded random init (--from-scratch); without --data, on the data the weights were trained on. Writes
    OUT/results.json."""
    from pretexts.engine import ProbeConfig, run_probe
    from pretexts.engine.evaluation.probe_config import BUILTIN_PROBE_PARAMS, with_probe_args
    from pretexts.engine.training import distributed

    given = {key: options.pop(key) for key in BUILTIN_PROBE_PARAMS}
    args = {**{k: v for k, v in given.items() if v not in (None, ())}, **parse_task_args(probe_args, "--probe-arg")}
    from_file: list[str] = []  # what came from --config, said after the start line
    cfg = build_config(
        ProbeConfig,
        {"probe_args": args, **options},
        config,
        sets,
        merge=("probe_args",),
        loose=with_probe_args,
        echo=from_file.append,
    )
    echo = rank_zero_echo(distributed.launched_rank())
    try:
        run_probe(cfg, echo=then_say(echo, from_file, processes_note(distributed.launched_world())))
    finally:
        distributed.teardown()
    echo(wrote_folder(cfg.out))


def then_say(echo, lines: list[str], start_note: str = ""):
    """`echo`, ending the first line it prints (the run's start line) with `start_note` and saying `lines` after it."""
    first = True

    def say(line: str) -> None:
        nonlocal first
        echo(line + start_note if first else line)
        first = False
        while lines:
            echo(lines.pop(0))

    return say
