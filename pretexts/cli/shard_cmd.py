"""`pretexts shard`: an image folder packed into WebDataset tar shards with a manifest, which `train --data` reads."""

import shlex
import signal
import sys
from contextlib import contextmanager
from pathlib import Path

import click

from . import main, printable
from .user_paths import UserPath


@main.command("shard")
@click.argument("source", type=UserPath())
@click.argument("out", type=UserPath())
@click.option(
    "--shard-size",
    type=click.IntRange(1, 1_000_000),
    default=1000,
    show_default=True,
    help="Images per shard (the last of a split holds the rest). Under torchrun every rank and loader worker "
    "reads whole shards, so write at least ranks x workers of them.",
)
@click.option(
    "--shuffle/--no-shuffle",
    default=True,
    show_default=True,
    help="Pack each split's images in a seeded random order, so a shard holds a mix of classes; "
    "--no-shuffle keeps the folder's order.",
)
@click.option("--seed", type=click.IntRange(0, 2**32 - 1), default=0, show_default=True, help="Seed of the order.")
@click.option(
    "--force", is_flag=True, help="Write into a non-empty OUT, replacing an earlier shard set there (its .tar files)."
)
def shard_command(source: str, out: str, shard_size: int, shuffle: bool, seed: int, force: bool) -> None:
    """Pack the images of SOURCE into WebDataset shards in OUT, with OUT/manifest.json listing the shards, their
    image counts, the classes and the images skipped as unreadable.

    SOURCE is an ImageFolder tree with train/ and val/ (the ImageNet layout: train/n01440764/*.JPEG, ...), a
    folder of class folders (every image goes to train), or a folder of unlabelled images (pretraining only);
    `sample` packs the embedded CIFAR-10 images. Each image file's own bytes are stored, never re-encoded, with its
    path relative to SOURCE (a warning about a sample that cannot be decoded names it); each file is checked first,
    as `pretexts train` checks a folder, and one that cannot be read is skipped.

    \b
    Example, ImageNet-1k (1.28M training images -> 1282 shards of about 110 MB):
      pretexts shard /data/imagenet /data/imagenet-shards --shard-size 1000
      pretexts train --data /data/imagenet-shards --img-size 224
    """
    from pretexts.engine.data.shard_writer import write_shards
    from pretexts.engine.training.run_folder import RunLock

    def hold(folder):  # one writer per OUT, as every command that writes a folder; taken before the source is read
        return RunLock(folder, "shard", option="OUT")

    try:
        with signal_as_interrupt(signal.SIGTERM):
            summary = write_shards(
                source, out, shard_size, shuffle, seed, force, echo=lambda line: click.echo(line), hold=hold
            )
    except KeyboardInterrupt as stop:
        code = 128 + int(stop.args[0]) if stop.args else 130
        unfinished = not (Path(out) / "manifest.json").exists() and any(Path(out).glob("*-*.tar"))
        words = "Terminated" if code == 128 + signal.SIGTERM else "Interrupted"
        click.echo(
            f"{words}: {printable(out)}/ holds an incomplete shard set (no manifest.json); run the same command with "
            f"--force to write it again."
            if unfinished
            else f"{words}.",
            err=True,
        )
        sys.exit(code)
    splits = summary.manifest["splits"]
    per_split = ", ".join(
        f"{name} {count(split['images'], 'image')} in {len(split['shards'])}" for name, split in splits.items()
    )
    classes = summary.manifest["classes"]
    labels = count(len(classes), "class", "classes") if classes else "unlabelled"
    click.echo(
        f"wrote {count(summary.images, 'image')} in {count(summary.shards, 'shard')} "
        f"({summary.bytes / 2**20:.1f} MB) and manifest.json to {printable(summary.out)}/: {per_split}; {labels}."
    )
    if summary.layout in ("classes", "flat"):
        click.echo(
            "no train/ and val/ folders: every image went to train, so `train` measures no held-out error; for a val "
            "split give SOURCE/train/ and SOURCE/val/."
        )
    skipped = summary.skipped
    if skipped:
        shown = "; ".join(f"{Path(path).name}: {why}" for path, why in skipped[:3])
        more = f"; and {len(skipped) - 3} more" if len(skipped) > 3 else ""
        click.echo(
            f"skipped {count(len(skipped), 'unreadable image')} (listed in manifest.json): {printable(shown)}{more}."
        )
    elif summary.loose:
        click.echo(f"skipped 0 unreadable images; left out {count(summary.loose, 'image file')} beside class folders.")
    else:
        click.echo("skipped 0 images: every file could be read.")
    click.echo(next_command(summary))


@contextmanager
def signal_as_interrupt(sig: signal.Signals):
    """`sig` raises KeyboardInterrupt(sig) while packing, as Ctrl-C does: the tar being written is closed whole and
    the user is told what OUT holds (outside the main thread no handler can be set, and none is)."""

    def stop(signum, frame):
        raise KeyboardInterrupt(signum)

    try:
        previous = signal.signal(sig, stop)
    except ValueError:
        yield
        return
    try:
        yield
    finally:
        signal.signal(sig, previous)


def next_command(summary) -> str:
    """The `train` command for these shards: every loader worker reads whole shards, so a split of fewer training
    shards than the default --workers needs fewer workers (a note says how to write more)."""
    import dataclasses

    from pretexts.engine.training.config import PretrainConfig

    default = {f.name: f.default for f in dataclasses.fields(PretrainConfig)}["workers"]
    train = summary.manifest["splits"]["train"]
    shards, images = len(train["shards"]), train["images"]
    line = f"next: pretexts train --data {shlex.quote(printable(summary.out))}"
    if shards >= default:
        return line
    more = f"; for more, shard again with --shard-size {images // default}" if images >= default else ""
    click.echo(
        f"{count(shards, 'training shard')}: each loader worker of each rank reads whole shards, so ranks x --workers "
        f"may be at most {shards} (--workers 0 counts as 1), fewer than the default --workers {default}{more}."
    )
    return f"{line} --workers {shards}"


def count(n: int, noun: str, plural: str | None = None) -> str:
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
