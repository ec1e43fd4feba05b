"""`pretexts compare`: say the plan and what it will cost, run every cell of the comparison
(engine/compare/cells.py) with an ETA after each, then rank them (report.py, terminal.py). OUT holds the cells
(OUT/cells/BACKBONE/ARM/seedS/cell.json), so the same command run again after an interruption resumes where it
stopped; --force starts over."""

import dataclasses
import json
import shutil
import textwrap
import time
from collections.abc import Callable
from pathlib import Path

import torch

import pretexts
from pretexts.backbones.factory import create_backbone
from pretexts.backbones.normalisation import normalisation
from pretexts.engine.compare.cells import (
    OPTION_OF,
    arms_for,
    changes_text,
    clock_kind,
    pretrain_config,
    run_cell,
    setting_changes,
    settings,
)
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.inputs import forget, probe_inputs
from pretexts.engine.compare.plan import Pace, clock_time, fixed_seconds, measure_costs
from pretexts.engine.compare.report import UNIT_WORDS, budget_name, plot, summarise, table, write_csv
from pretexts.engine.compare.scoring import Interrupted, tuned_as_asked
from pretexts.engine.compare.terminal import WIDTH, terminal_table
from pretexts.engine.data.datasets import recorded_spec
from pretexts.engine.data.labelled_data import describe_sizes, missing_split, split_sizes
from pretexts.engine.data.stream_inputs import streamed_classes
from pretexts.engine.data.streams import is_stream, stream_shards
from pretexts.engine.evaluation.pretrained import GIVEN, downstream_splits
from pretexts.engine.evaluation.probe_config import ProbeConfig
from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.engine.training.file_writes import write_json, write_text
from pretexts.engine.training.interrupt import StopSignals
from pretexts.engine.training.preflight import resolve_device
from pretexts.engine.training.progress import duration
from pretexts.engine.training.resume_config import same_file
from pretexts.engine.training.run_folder import RunLock, claim_output_dir
from pretexts.engine.training.settings import expect_config
from pretexts.errors import OutputError
from pretexts.registry import METHODS

OUTPUTS = ("compare.json", "compare.md", "compare.csv", "compare.png")
CROP_PCT = ProbeConfig.__dataclass_fields__["crop_pct"].default  # the probes' evaluation crop


def claim_compare_dir(out: Path, force: bool, inputs) -> None:
    """A folder holding another command's run is refused (without --force); one holding an earlier comparison is
    continued, its cells reused, or with --force emptied of them first."""
    claim_output_dir(out, None, force, inputs=inputs, resumable=False)
    if force:
        shutil.rmtree(out / "cells", ignore_errors=True)
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)


def cell_folder(cfg: CompareConfig, arm, seed: int) -> Path:
    return Path(cfg.out) / "cells" / cfg.backbone / arm.folder / f"seed{seed}"


def finished(cfg: CompareConfig, arm, folder: Path) -> bool:
    """Whether the cached cell already holds every asked point (and fine-tune): it will only be read back."""
    try:
        cell = json.loads((folder / "cell.json").read_text())
    except (OSError, ValueError):
        return False
    budgets = ["0"] if arm.method is None else [budget_name(m) for m in cfg.budgets]
    points = cell.get("points", {})
    if not all("knn_std" in points.get(key, {}) for key in budgets):
        return False
    return not cfg.finetune_epochs or tuned_as_asked(cell.get("finetunes", {}).get(budgets[-1], {}), cfg)


def refuse_other_settings(cfg: CompareConfig, todo: list) -> None:
    """Before the plan, as the run would after it: a cached cell measured under other settings (cells.settings) is
    refused, in one line that says what differs and how to reuse it instead."""
    wanted = {}
    for arm, seed in todo:
        try:
            cell = json.loads((cell_folder(cfg, arm, seed) / "cell.json").read_text())
        except (OSError, ValueError):  # none yet, or unreadable: the run measures it, or resumes a stopped one
            refuse_other_resume(cfg, arm, seed)
            continue
        if arm.name not in wanted:
            wanted[arm.name] = settings(cfg, arm)
        changes = setting_changes(cell, wanted[arm.name])
        if not changes:
            continue
        back = [f"{OPTION_OF[key]} {was}" for key, was, _ in changes if key in OPTION_OF and was is not None]
        reuse = f"rerun with {' '.join(back)} to reuse them, " if len(back) == len(changes) else ""
        raise OutputError(
            f"the cells cached in {cfg.out} were measured with other settings ({changes_text(changes)}): "
            f"{reuse}give --force to measure them again, or another --out."
        )


# what a cell's pretraining run takes from compare's options (a streamed run's --workers sets its readers' order)
RESUMED_OPTIONS = {"backbone": "--backbone", "data": "--data", "img_size": "--img-size", "batch_size": "--batch-size"}


def refuse_other_resume(cfg: CompareConfig, arm, seed: int) -> None:
    """A cell stopped mid-pretraining (run/checkpoint.pt, no cell.json) that this run would resume with other
    settings, which `train`'s resume refuses, is refused now in compare's words: the old values, or --force."""
    run = cell_folder(cfg, arm, seed) / "run"
    if arm.method is None or not ((run / "checkpoint.pt").is_file() and (run / "budget.json").is_file()):
        return
    try:  # train writes config.json once the checkpoint's settings are checked: the same, without the weights
        saved = json.loads((run / "config.json").read_text())
    except (OSError, ValueError):
        saved = load_checkpoint(run / "checkpoint.pt", kinds=("pretrain",))["config"]
    wanted = dataclasses.asdict(pretrain_config(cfg, arm, seed, run))
    options = RESUMED_OPTIONS | ({"workers": "--workers"} if is_stream(cfg.data) else {})
    changes = [(key, saved.get(key), wanted[key]) for key in options if not same_setting(key, saved.get(key), wanted)]
    if changes:
        text = "; ".join(f"{options[key]} {was}, asked {asked}" for key, was, asked in changes)
        back = " ".join(f"{options[key]} {was}" for key, was, _ in changes)
        raise OutputError(
            f"the cell {run.parent} stopped mid-pretraining under other settings ({text}): rerun with {back} to "
            f"continue it, give --force to measure the cells again, or another --out."
        )


def same_setting(key: str, saved, wanted: dict) -> bool:
    """The saved value is the one asked: train records its data absolute (`recorded_spec`), compare as typed."""
    if key == "data":
        return str(saved) == str(wanted[key]) or saved == recorded_spec(wanted[key]) or same_file(saved, wanted[key])
    return str(saved) == str(wanted[key])


def check_labelled_data(cfg: CompareConfig) -> None:
    """Shards lacking a split the probes score on, or (to fine-tune) their class names, are refused before the plan,
    not after it is printed or the first pair has pretrained; so is a folder with train/ but no val/."""
    root = Path(cfg.data).expanduser()
    if not is_stream(cfg.data):
        folder = cfg.data not in ("sample", "synthetic") and not (root / "cifar-10-batches-py").is_dir()
        if folder and (root / "train").is_dir() and not (root / "val").is_dir():
            raise missing_split(cfg.data, "val")  # labelled_splits' refusal, said after the plan otherwise
        return
    splits = {split: stream_shards(cfg.data, split) for split in ("train", "val")}
    for split, shards in splits.items():
        if shards is None:
            raise missing_split(cfg.data, split)
    if cfg.finetune_epochs:
        streamed_classes(cfg.data, splits["train"])


def check_arms(cfg: CompareConfig, arms: list) -> None:
    """Each pretraining arm's model built on the CPU with its task bound to it, as its cells will build them: a
    method or task the backbone cannot take (MAE on a ConvNeXt) is refused in the method's own one line."""
    for arm in arms:
        if arm.method is not None:
            run = pretrain_config(cfg, arm, cfg.seeds[0], Path(cfg.out))
            task = pretexts.create_pretext(run.task, **run.task_args)
            METHODS.get(run.method)(run, task, torch.device("cpu")).setup()


def remove_empty_folders(folders, root: Path) -> None:
    """Remove each of `folders` that holds nothing, then its parents up to `root` (included) while they are empty:
    a cell refused as it started leaves no folder. One another process fills meanwhile is left alone."""
    for folder in folders:
        while folder.is_dir() and folder.is_relative_to(root):
            try:
                folder.rmdir()  # refuses a folder that is not empty
            except OSError:
                break
            folder = folder.parent


def wrapped(text: str) -> list[str]:
    return textwrap.wrap(text, WIDTH, subsequent_indent="  ")


def plan(cfg: CompareConfig, todo: list, cached: set, arms: list, say: Callable[[str], None]) -> Pace:
    """Prints the plan and the estimate (modelled from timed batches, see plan.py); returns the pace keeper. The
    probes' images are decoded here, once for every cell."""
    kind = clock_kind(cfg)
    runs = sum(1 for arm, seed in todo if arm.method is not None and (arm.name, seed) not in cached)
    randoms = sum(1 for arm, seed in todo if arm.method is None and (arm.name, seed) not in cached)
    clock_words = "CPU time of the training steps" if kind == "process" else "wall-clock of the training steps"
    pairs = f"{len(arms) - 1} pair{'s' if len(arms) != 2 else ''}"
    for line in wrapped(
        f"plan: {pairs} and random init on {cfg.backbone}, '{cfg.data}', seeds "
        f"{' '.join(map(str, cfg.seeds))}: {len(todo)} cells ({runs} to pretrain, {randoms} random init, "
        f"{len(cached)} cached); budget {', '.join(map(budget_name, cfg.budgets))} {UNIT_WORDS[cfg.unit]} a pair "
        f"({kind} clock: {clock_words}) -> {cfg.out}"
    ):
        say(line)
    if is_stream(cfg.data):  # what the probes read of each split of the shards
        for line in wrapped(f"the probes read {describe_sizes(probe_sizes(cfg))} of '{cfg.data}'"):
            say(line)
    pace = Pace({"pretrained": runs, "random": randoms}, {"pretrained": 0.0, "random": 0.0})
    if not runs + randoms:
        say("estimate: nothing to run, every cell is cached (--force measures them again)")
        return pace
    if cfg.threads:  # timed as the cells will run
        torch.set_num_threads(cfg.threads)
    device = resolve_device(cfg.device)
    start = time.time()
    model = create_backbone(cfg.backbone, img_size=cfg.img_size).to(device)
    costs = measure_costs(model, cfg.img_size, cfg.batch_size, time.time() - start)
    start = time.time()
    train, val, _ = probe_inputs(cfg.data, cfg.img_size, *normalisation(model), CROP_PCT, cfg.seeds[0], cfg.max_images)
    decode = time.time() - start
    sizes = (len(train), len(val))
    budget = (
        max(cfg.budgets) * cfg.batch_size * costs.step
        if cfg.unit == "steps"
        else 60 * max(cfg.budget) * (costs.wall_per_cpu if kind == "process" else 1.0)
    )
    points = len(cfg.budgets)
    pace.modelled = {
        "pretrained": budget + fixed_seconds(costs, *sizes, points, cfg.finetune_epochs, run=True),
        "random": fixed_seconds(costs, *sizes, 1, cfg.finetune_epochs, run=False),
    }
    fixed = fixed_seconds(costs, *sizes, points, cfg.finetune_epochs, run=True)
    total = pace.total()
    ratio = f"{costs.wall_per_cpu:.2f} wall-s per CPU-s, " if kind == "process" else ""
    pretraining = (
        f"{runs} x {budget_name(max(cfg.budgets))} steps of pretraining (each priced as one timed supervised step of "
        f"{cfg.backbone}, so a lower bound: an exact energy step costs several)"
        if cfg.unit == "steps"
        else f"{runs} x {max(cfg.budget):g} min of pretraining ({ratio}from one timed training step of {cfg.backbone})"
    )
    for line in wrapped(
        f"estimate: about {duration(total)} in all, done about {clock_time(total)}. Modelled, not measured: "
        f"{pretraining}, plus about {duration(fixed)} a pretrained cell for the model, the probes over "
        f"{sum(sizes)} images"
        f"{f' and {cfg.finetune_epochs} fine-tune epochs' if cfg.finetune_epochs else ''} (priced from one timed "
        f"batch; the images were decoded once, in {duration(decode)}). After each cell the ETA is the pace so far."
    ):
        say(line)
    return pace


def val_count(cfg: CompareConfig, cells: dict) -> int:
    """The val images the scores were measured on: as the cells record, else counted in the data."""
    recorded = {p["val_images"] for cell in cells.values() for p in cell["points"].values() if "val_images" in p}
    if len(recorded) == 1:
        return recorded.pop()
    return probe_sizes(cfg)["val"]


def probe_sizes(cfg: CompareConfig) -> dict:
    """The images of each split the probes read, and of how many (labelled_data.split_sizes), without reading an
    image: of shards, the first --max-images of the counts in their manifest or headers; of a folder, its scan."""
    if not is_stream(cfg.data):
        return split_sizes(*downstream_splits(cfg.data, GIVEN, cfg.img_size, cfg.seeds[0]))
    of = {split: len(stream_shards(cfg.data, split) or ()) for split in ("train", "val")}
    return {**{split: min(count, cfg.max_images) for split, count in of.items()}, "of": of}


def run_cells(cfg: CompareConfig, todo: list, cached: set, pace: Pace, stop, say: Callable[[str], None]) -> dict:
    """Every cell in turn (cached ones read back), with a line and an ETA after each. SIGTERM or Ctrl-C (`stop`)
    ends the comparison at the next point where what the cell has is saved (engine/compare/cells.Interrupted); one
    after the last cell's line returns, so the report is written."""
    cells = {}
    for i, (arm, seed) in enumerate(todo, 1):
        start, folder = time.time(), cell_folder(cfg, arm, seed)
        continued = (folder / "cell.json").is_file() or (folder / "run" / "checkpoint.pt").is_file()
        cell = run_cell(cfg, arm, seed, folder, stop=stop)
        if cell is None:
            say(f"[{i}/{len(todo)}] {arm.name}, seed {seed}: another process is running it; skipped")
            continue
        cells[(arm.name, seed)] = cell
        top = cell["points"][max(cell["points"], key=float)]
        line = f"[{i}/{len(todo)}] {arm.name}, seed {seed}: kNN {top['knn']:.2f}, linear {top['linear']:.2f}"
        if (arm.name, seed) in cached:
            line += " (cached)"
        else:
            pace.done("pretrained" if arm.method else "random", None if continued else time.time() - start)
            eta = pace.eta()
            line += f"; {duration(time.time() - start)}" + (
                f"; ETA {duration(eta)} ({clock_time(eta)})" if eta > 0 else ""
            )
        for part in wrapped(line):
            say(part)
        if stop.requested and i < len(todo):  # after the last cell, the report is written first (compare)
            raise Interrupted(stop.signal.name, stop.exit_code, "between cells")
    return cells


def compare(cfg: CompareConfig, echo: Callable[[str], None] = print) -> dict:
    """The plan and its estimate, every cell of the comparison (cached ones read back) with an ETA, then the ranked
    table (the terminal's within 100 columns; compare.md and compare.csv with every column), the plot and
    compare.json; returns {'rows': ..., 'cells': ...}. SIGTERM or Ctrl-C raises `Interrupted` once what it stopped
    has been saved: the cell's phase, or (every cell done) the report."""
    expect_config(cfg, CompareConfig)
    out = Path(cfg.out)
    began = time.time()
    arms = arms_for(cfg.tasks, cfg.methods)
    check_arms(cfg, arms)  # before OUT is claimed and a step timed: a pair that cannot run is refused first
    check_labelled_data(cfg)
    with RunLock(out, "compare"):
        claim_compare_dir(out, cfg.force, inputs=[cfg.data])
        forget()
        todo = [(arm, seed) for arm in arms for seed in cfg.seeds]
        refuse_other_settings(cfg, todo)  # before "cached": a cell the run would refuse is not counted as done
        cached = {(arm.name, seed) for arm, seed in todo if finished(cfg, arm, cell_folder(cfg, arm, seed))}
        say = (lambda line: None) if cfg.quiet else echo
        for note in cfg.notes:  # a name given twice, kept once (config.py)
            say(note)
        pace = plan(cfg, todo, cached, arms, say)
        estimate = pace.total()
        # the report too under the stop: a signal once every cell is done has it written, then exits as stopped
        try:
            with StopSignals() as stop:
                cells = run_cells(cfg, todo, cached, pace, stop, say)
                record = write_report(cfg, cells, began, estimate, echo)
        finally:  # a cell refused as it started leaves no empty folders behind
            remove_empty_folders([cell_folder(cfg, arm, seed) for arm, seed in todo], out / "cells")
        forget()  # the decoded images: memory for the next comparison in this process
        if stop.requested:
            raise Interrupted(stop.signal.name, stop.exit_code, "after the last cell", finished=True, record=record)
        return record


def write_report(cfg: CompareConfig, cells: dict, began: float, estimate: float, echo: Callable[[str], None]) -> dict:
    """The ranked table (the terminal's, and compare.md / compare.csv with every column), the plot and
    compare.json; returns compare.json's record."""
    out = Path(cfg.out)
    val_images = val_count(cfg, cells)
    images = probe_sizes(cfg) if is_stream(cfg.data) else None  # a folder's splits are read whole
    rows = summarise(cells, cfg.budgets, cfg.finetune_epochs, cfg.unit)
    kind = clock_kind(cfg)
    echo(terminal_table(rows, cfg.rank_by, kind, val_images))
    write_text(out / "compare.md", table(rows, cfg.rank_by, kind, val_images) + "\n")
    write_csv(rows, cfg.rank_by, kind, val_images, out / "compare.csv")
    plot(
        rows,
        cfg.rank_by,
        out / "compare.png",
        f"{cfg.backbone} on '{cfg.data}', {len(cfg.seeds)} seed{'s' if len(cfg.seeds) > 1 else ''}: "
        f"features after {budget_name(max(cfg.budgets))} {UNIT_WORDS[cfg.unit]} of pretraining",
        val_images,
    )
    record = {
        "config": dataclasses.asdict(cfg),
        "rows": rows,
        "val_images": val_images,
        "images": images,
        "cells": {f"{name} / seed {seed}": cell for (name, seed), cell in cells.items()},
    }
    write_json(out / "compare.json", json.loads(json.dumps(record)))
    took = time.time() - began
    for line in wrapped(
        f"wrote {out}/: compare.md, compare.csv, compare.png, compare.json, cells/; took {duration(took)}"
        + (f" (estimated {duration(estimate)})" if estimate else "")
    ):
        echo(line)
    return record
