"""The `pretexts` command: one click group; each subcommand lives in its own module."""

import contextlib
import errno
import os
import signal
import sys
import time
import warnings
from pathlib import Path
from typing import NoReturn

import click

from ..errors import PretextsError
from ..shown_text import escape_controls


class FriendlyGroup(click.Group):
    """Turns a PretextsError into a one-line message and exit code 2; `--debug` shows the traceback.

    So are a NaN loss (FloatingPointError) and a file-system error naming a path (a read-only or
    missing folder, a full disk). Ctrl-C outside a training loop, which saves and exits by itself,
    ends with "Interrupted." (naming the checkpoint --resume continues, where a run has one) and code 130.
    Click's own errors (an unknown option, a value of the wrong type) are one line too, naming the command's
    --help (`main`).
    """

    def main(self, args=None, prog_name=None, complete_var=None, standalone_mode=True, **extra):
        """Click's `main` with its errors in one line: usage errors exit 2, --help and --version 0, Ctrl-C 130.
        With standalone_mode False (the caller handles the errors) it is click's own."""
        if not standalone_mode:
            return super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        try:
            code = super().main(args, prog_name, complete_var, standalone_mode=False, **extra)
        except click.exceptions.NoArgsIsHelpError as err:  # `pretexts` alone: the help, as click shows it
            err.show()
            sys.exit(err.exit_code)
        except click.UsageError as err:
            see = f" See '{err.ctx.command_path} --help'." if err.ctx is not None else ""
            fail(f"{one_line(err.format_message())}{see}", err.exit_code)
        except click.ClickException as err:
            fail(one_line(err.format_message()), err.exit_code)
        except click.Abort as err:  # click turns Ctrl-C (and end of input at a prompt) into Abort
            if isinstance(err.__cause__, KeyboardInterrupt):
                click.echo("Interrupted.", err=True)
                sys.exit(130)
            click.echo("Aborted!", err=True)
            sys.exit(1)
        # back comes ctx.exit's code (--help, --version) or a command's return value (None: success)
        sys.exit(code if isinstance(code, int) and not isinstance(code, bool) else 0)

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except (PretextsError, FloatingPointError, OSError, KeyboardInterrupt) as err:
            path_error = isinstance(err, OSError) and not isinstance(err, PretextsError)
            if ctx.params.get("debug") or path_error and err.errno not in WRITE_ERRORS and err.filename is None:
                raise
            if isinstance(err, KeyboardInterrupt):
                click.echo(interrupted_line(ctx), err=True)
                sys.exit(130)
            command = self.get_command(ctx, ctx.invoked_subcommand)
            message = (
                path_message(err, resumable=any(param.name == "resume" for param in getattr(command, "params", ())))
                if path_error
                else with_flag(user_message(err), command)
            )
            fail(message, 2)


# A full disk, a quota, a read-only file system: the user's to fix, even where no path is named.
WRITE_ERRORS = {errno.ENOSPC, errno.EDQUOT, errno.EROFS, errno.EFBIG}


# How long a rank other than 0 waits before it prints its error: torchrun ends it as soon as rank 0 fails (it checks
# every 0.1 s), and ranks that raise the same error reach it within a few seconds of each other (imports included).
RANK_ERROR_WAIT_S = 10.0


def fail(message: str, code: int) -> NoReturn:
    """Print `Error: message` and exit with `code`, once under torchrun. Every rank runs the same command on the same
    data, so an error is almost always raised by all of them: rank 0 prints it at once, and a rank > 0 first waits,
    quietly, for torchrun to end it (which it does when rank 0 exits). A rank still running after the wait hit an
    error that rank 0 did not (a file of its own shard): it prints it, naming its rank."""
    rank = torchrun_rank()
    if rank > 0:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # torchrun's stop ends this process without a word
        try:
            time.sleep(RANK_ERROR_WAIT_S)
        except KeyboardInterrupt:
            sys.exit(130)
    click.echo(f"Error{f' (rank {rank})' if rank else ''}: {message}", err=True)
    sys.exit(code)


def torchrun_rank() -> int:
    """This process's rank under torchrun, 0 otherwise (RANK and WORLD_SIZE set by another launcher, a Kubeflow pod
    say, do not make a rank: nothing there ends the others); read from the environment, so known before the process
    group exists (and without importing torch)."""
    if not os.environ.get("TORCHELASTIC_RUN_ID") or int(os.environ.get("WORLD_SIZE", "1")) <= 1:
        return 0
    return int(os.environ.get("RANK", "0"))


def processes_note(world: int) -> str:
    """' on N processes' for a start line under torchrun (it confirms the world size each batch is split over)."""
    return f" on {world} processes" if world > 1 else ""


def user_message(err: Exception) -> str:
    """One line. An error raised in a DataLoader worker arrives wrapped in the worker's traceback;
    its last line holds the original message."""
    text = str(err)
    if "Original Traceback" in text:
        text = text.strip().splitlines()[-1].split(": ", 1)[-1]
    return one_line(text)


def with_flag(message: str, command) -> str:
    """'batch_size must be in [1, 65536], got 0.' -> '--batch-size (batch_size) must be ...': a range or type error
    names the settings field, which a config file uses; the command line's user typed the flag."""
    field = message.split(" ", 1)[0]
    for param in getattr(command, "params", ()):
        if isinstance(param, click.Option) and param.name == field and message.startswith(f"{field} must "):
            return f"{max(param.opts, key=len)} ({field}){message[len(field) :]}"
    return message


def one_line(text: str) -> str:
    """One line, with control characters a name may carry (a terminal's escape sequences) written as escapes."""
    return escape_controls(" ".join(printable(text).split()))


def path_message(err: OSError, resumable: bool = True) -> str:
    """The error and the path it names; the --resume hint only from a command that has --resume."""
    where = f": '{printable(err.filename)}'" if err.filename else ""
    hint = " A training run continues from its last checkpoint with --resume." if resumable else ""
    return f"{err.strerror or err}{where}; check the path, its permissions and the free space.{hint}"


# a run's file that --resume continues, and what it writes after its last epoch's checkpoint
RESUMED = {
    "train": ("checkpoint.pt", ("results.json",)),
    "finetune": ("checkpoint.pt", ("finetuned.pt", "results.json")),
    "segment": ("segmenter.pt", ("results.json",)),
}


def interrupted_line(ctx) -> str:
    """The line a Ctrl-C ends a command with, and where the command's run folder holds its checkpoint, that --resume
    continues it. A run lets Ctrl-C through only where it cannot stop at a step (its start, its end-of-run outputs,
    a second Ctrl-C); its checkpoint is whole there, as every file of a run is written whole, then renamed."""
    from ..engine.training.run_folder import HELD_LOCK

    folder, command = ctx.meta.get(HELD_LOCK, (None, None))
    if command != ctx.invoked_subcommand or command not in RESUMED:
        return "Interrupted."
    checkpoint, outputs = RESUMED[command]
    if not (Path(folder) / checkpoint).is_file():
        return "Interrupted."
    missing = [name for name in outputs if not (Path(folder) / name).exists()]
    writes = f", and writes the missing {' and '.join(missing)}" if missing else ""
    return (
        f"Interrupted. '{printable(Path(folder) / checkpoint)}' is whole: the same command with --resume continues "
        f"from it{writes}."
    )


@click.group(cls=FriendlyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.option(
    "--debug", is_flag=True, help="Show full tracebacks instead of one-line errors, and warnings as Python shows them."
)
@click.version_option(package_name="pretexts")
def main(debug: bool) -> None:
    """Energy-inspired self-supervised pretraining (Wang et al., ICLR 2023): a zoo of pretext tasks."""
    if not debug:
        warnings.formatwarning = one_line_warning
    command = click.get_current_context().invoked_subcommand
    if command not in DATA_PARALLEL:
        single_process(command)


DATA_PARALLEL = ("train", "finetune", "probe", "segment")  # the commands that run under torchrun
SHOWN_WARNING = warnings.formatwarning
PACKAGES = ("pretexts", "pretexts.engine", "pretexts.backbones")


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """The package's own warnings as `warning: ...` lines, as its other notes are, not Python's two lines pointing
    into its code; a warning raised from elsewhere (a library's, or one pointing at the user's code) as Python
    shows it."""
    roots = [os.path.join(folder, "") for folder in package_folders()]
    if issubclass(category, UserWarning) and any(os.path.abspath(filename).startswith(root) for root in roots):
        return f"warning: {message}\n"
    return SHOWN_WARNING(message, category, filename, lineno, line)


def package_folders() -> list[str]:
    """The folders of pretexts, pretexts.engine and pretexts.backbones, found without importing the last two (a
    listing must not import torch)."""
    from importlib.util import find_spec

    return [folder for name in PACKAGES for folder in find_spec(name).submodule_search_locations]


def parse_task_args(pairs: tuple[str, ...], option: str = "--task-arg") -> dict[str, str]:
    """('scale=16', 'ratio=0.5') -> {'scale': '16', 'ratio': '0.5'}; tasks (and methods) convert the types."""
    args = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise click.BadParameter(f"'{pair}' is not KEY=VALUE (e.g. {option} scale=16).", param_hint=option)
        args[key.strip().replace("-", "_")] = value.strip()
    return args


LONG_SERIES = 100  # a numbered series of more files than this is shown with its count


def wrote_folder(out) -> str:
    """'wrote OUT/: its files' (one slash, however OUT was typed)."""
    return f"wrote {os.path.normpath(out)}/: {written_files(out)}"


def written_files(out) -> str:
    """Every file and folder in OUT, a numbered series shown once, in number order (epoch 1000 after 999):
    'checkpoint.pt, restoration_epoch001-020.png'; counted when it has gaps or is long (`LONG_SERIES`):
    'restoration_epoch050-400.png (8 files)'."""
    import re
    from pathlib import Path

    series: dict[tuple, list[str]] = {}
    for item in sorted(Path(out).iterdir()):
        if item.name.startswith("."):
            continue  # temporary files of an atomic write
        name = item.name + ("/" if item.is_dir() else "")
        match = re.fullmatch(r"(.*?)(\d+)(\.\w+)", name)
        series.setdefault((match[1], match[3]) if match else (name,), []).append(match[2] if match else "")
    names = []
    for key, numbers in series.items():
        if len(key) == 1:
            names.append(key[0])
            continue
        numbers.sort(key=lambda number: (int(number), number))
        first, last = numbers[0], numbers[-1]
        shown = key[0] + (first if len(numbers) == 1 else f"{first}-{last}") + key[1]
        gaps = int(last) - int(first) + 1 != len(numbers)
        names.append(shown + (f" ({len(numbers)} files)" if gaps or len(numbers) > LONG_SERIES else ""))
    return ", ".join(names)


def single_process(command: str) -> None:
    """Commands other than `DATA_PARALLEL` run in one process: under torchrun rank 0 says so in one line, the others
    leave quietly, instead of K full copies writing one folder."""
    if int(os.environ.get("WORLD_SIZE", "1")) > 1:
        if torchrun_rank() != 0:
            sys.exit(0)  # a failing rank makes torchrun kill rank 0 before it can print the message
        raise PretextsError(
            f"`pretexts {command}` runs in one process; start it without torchrun "
            f"({', '.join(DATA_PARALLEL[:-1])} and {DATA_PARALLEL[-1]} are the data-parallel commands)."
        )


def rank_zero_echo(rank: int):
    """click.echo on rank 0, nothing on the others: under torchrun one process speaks. A path whose name is not
    UTF-8 (held as surrogate escapes) is printed with backslash escapes, never an encoding error."""
    if rank != 0:
        return lambda *args, **kwargs: None
    return lambda message="", **kwargs: click.echo(printable(message), **kwargs)


@contextlib.contextmanager
def said_on_refusal(lines: list[str]):
    """What --config left out (`lines`), said by rank 0 when the run's start refuses its --out (an OutputError
    raised before the start line, after which these lines are said otherwise)."""
    from ..engine.training import distributed
    from ..errors import OutputError

    try:
        yield
    except OutputError:
        for line in lines:
            rank_zero_echo(distributed.launched_rank())(line)
        raise


def exit_if_interrupted(results: dict, checkpoint: str, echo) -> None:
    """A run stopped by a signal (its results say "interrupted"): say what its checkpoint holds, exit with its
    code."""
    if "interrupted" not in results:
        return
    kept = (
        f"{checkpoint} holds epoch {results['epochs']}. Continue with the same command and --resume."
        if results["epochs"]
        else "no epoch had finished, so there is nothing to resume: the same command starts it over."
    )
    echo(f"stopped by {results['interrupted']} in epoch {results['epochs'] + 1}; {kept}", err=True)
    sys.exit(results["exit_code"])


def printable(text) -> str:
    """`text` with what UTF-8 cannot encode (a file name's undecodable bytes) written as backslash escapes."""
    return str(text).encode("utf-8", "backslashreplace").decode("utf-8")


from . import (  # noqa: E402, F401 (subcommands register on import)
    compare_cmd,
    energy_cmd,
    export_cmd,
    finetune_cmd,
    list_cmd,
    probe_cmd,
    restore_cmd,
    segment_cmd,
    shard_cmd,
    train_cmd,
)
