"""One cell of a comparison: a (method, task) pair and a seed, pretrained for a budget of minutes (or of steps)
with a snapshot at each budget, then scored by kNN, the linear probe and (if asked) fine-tuning on val/. A cell is
cached as `cell.json` in its folder: a finished one is never run again, a new budget reruns its pretraining
(snapshots are not kept) but probes only what is missing, and a cell being run holds a `claim` file, so several
processes can share one cache (`pretexts compare`, and the studies that use its cells)."""

import dataclasses
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

import pretexts
from pretexts.engine.compare.point_measures import PointMeasures
from pretexts.engine.compare.report import budget_name
from pretexts.engine.compare.scoring import Interrupted, finetune, probe, tuned_as_asked
from pretexts.engine.data.streams import is_stream
from pretexts.engine.methods.energy.method import resolve_auto
from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.engine.training.config import PretrainConfig, with_method_args
from pretexts.engine.training.file_writes import write_json
from pretexts.engine.training.loop import Pretrainer
from pretexts.engine.training.preflight import resolve_device
from pretexts.engine.training.processes import process_alive
from pretexts.engine.training.recipes import AUTO_SCHEDULE
from pretexts.errors import OutputError, ParameterError
from pretexts.registry import METHODS

RANDOM = "random init"
LOG_ROWS = 64  # rows of the training log a cell keeps


@dataclass
class Arm:
    """A row of the comparison: `method` (None: the untrained backbone) with PretrainConfig `overrides` (task,
    task_args, method_args, recipe, ...); `name` labels the row."""

    name: str
    method: str | None
    overrides: dict = field(default_factory=dict)

    @property
    def folder(self) -> str:
        return "random" if self.method is None else self.name.replace(" on ", "__").replace(" ", "_")


def arms_for(tasks, methods) -> list[Arm]:
    """Every (method, task) pair, a method that masks on its own (`Method.uses_task` False) once, and the
    random-init row last."""
    METHODS.load()
    arms = []
    for method in methods:
        if getattr(METHODS.get(method), "uses_task", True):
            arms += [Arm(f"{method} on {task}", method, {"task": task}) for task in tasks]
        else:
            arms.append(Arm(method, method, {}))
    return [*arms, Arm(RANDOM, None)]


def clock_kind(study) -> str:
    """Process CPU time on a CPU (the same compute whatever else runs), wall-clock on a GPU (whose work the
    process clock does not see)."""
    if study.clock != "auto":
        return study.clock
    return "process" if resolve_device(study.device).type == "cpu" else "wall"


def clock(kind: str) -> float:
    return time.process_time() if kind == "process" else time.time()


class BudgetedPretrainer(Pretrainer):
    """A pretraining run that writes a snapshot checkpoint at each budget (minutes of training steps, or a count of
    them) and ends at the last. Only the steps are timed: the end-of-epoch figures are skipped, checkpoint writes
    not counted. Each epoch's checkpoint carries the budget's state beside it (budget.json), so a stopped run
    resumes with its clock and the snapshots it took."""

    def start_clock(self, budgets: list, folder: Path, kind: str, unit: str) -> None:
        self.marks, self.folder, self.kind, self.spent, self.snapshots = sorted(budgets), folder, kind, 0.0, {}
        self.unit = unit

    def train_step(self, images):
        start = clock(self.kind)
        stats = super().train_step(images)
        if self.kind == "wall" and images.is_cuda:
            torch.cuda.synchronize()
        self.spent += clock(self.kind) - start
        while self.marks and self.used() >= self.marks[0]:
            budget = self.marks.pop(0)
            path = self.folder / f"m{budget_name(budget)}" / "checkpoint.pt"
            path.parent.mkdir(parents=True, exist_ok=True)
            self.save(path)
            self.snapshots[budget] = {"steps": self.global_step, "seconds": self.spent}
        if not self.marks:
            self.steps_per_epoch, self.cfg.epochs = self.batch + 1, self.epoch + 1  # ends the epoch and the run
        return stats

    def used(self) -> float:
        """The budget spent so far, in its unit."""
        return self.global_step if self.unit == "steps" else self.spent / 60

    def end_of_epoch_outputs(self) -> None:
        pass

    def save(self, path: Path | None = None) -> Path:
        """A snapshot at `path`; else the run's checkpoint, its budget's state written first (a kill between the two
        leaves a state a step ahead, whose snapshots are on disk already)."""
        if path is None:
            snapshots = {budget_name(m): s for m, s in self.snapshots.items()}
            write_json(self.out / "budget.json", {"spent": self.spent, "snapshots": snapshots})
        return super().save(path)

    def load(self, path: Path) -> None:
        super().load(path)
        state = json.loads((self.out / "budget.json").read_text())
        self.spent = state["spent"]
        self.snapshots = {
            m: state["snapshots"][budget_name(m)] for m in self.marks if budget_name(m) in state["snapshots"]
        }
        self.marks = [m for m in self.marks if m not in self.snapshots]

    def write_results(self, results: dict) -> None:
        """results.json without the loss-curve figure (the cell's folder is removed once it is scored)."""
        write_json(self.out / "results.json", results)


def pretrain_config(study, arm: Arm, seed: int, out: Path) -> PretrainConfig:
    """The arm's run; a method's own options among its overrides (e.g. grad_mode) go into method_args. An override
    wins over the cell's own values (`epochs`: a schedule planned to end at the budget). An open-ended run is cut at
    its budgets rather than planned to one, so `--schedule auto` has no end to decay to there: it keeps the lr
    constant."""
    cfg = PretrainConfig(
        **with_method_args(
            dict(
                method=arm.method or "energy",
                backbone=study.backbone,
                data=study.data,
                img_size=study.img_size,
                batch_size=study.batch_size,
                epochs=100000,
                seed=seed,
                workers=study.workers,
                device=study.device,
                out=str(out),
                eval_images=256,
                figure_images=4,
                quiet=True,
                force=True,
                save_every=study.save_every,
                # eager unless the arm compiles: at the study's minutes compiling did not pay (docs/performance.md)
                compile=None,
            )
            | arm.overrides
        )
    )
    if cfg.schedule == AUTO_SCHEDULE and "epochs" not in arm.overrides:
        return dataclasses.replace(cfg, schedule="constant")
    return cfg


def pretrain(study, arm: Arm, seed: int, folder: Path, budgets: list) -> dict:
    """Pretrain to the largest of `budgets` (the study's unit), leaving a snapshot at each; their steps and
    seconds, the monitor's history, the thinned training log and the arithmetic. A run stopped before continues from
    its checkpoint; one stopped now raises `Interrupted`."""
    cfg = pretrain_config(study, arm, seed, folder / "run")
    if (folder / "run" / "checkpoint.pt").is_file() and (folder / "run" / "budget.json").is_file():
        cfg = dataclasses.replace(cfg, resume="auto")
    trainer = BudgetedPretrainer(cfg)
    trainer.start_clock(budgets, folder, clock_kind(study), study.unit)
    planned = trainer.steps_per_epoch * cfg.epochs
    if study.unit == "steps" and planned < max(budgets):  # refused before it trains, not after
        raise short_run(arm, planned, max(budgets), study.unit)
    results = trainer.run()
    if "interrupted" in results:
        raise Interrupted(results["interrupted"], results["exit_code"], "pretraining")
    if trainer.marks:  # a minutes budget the planned epochs did not reach
        raise short_run(arm, trainer.global_step, trainer.marks[0], study.unit)
    history = trainer.monitor.history if trainer.monitor else None
    return {
        "snapshots": {budget_name(m): s for m, s in trainer.snapshots.items()},
        "monitor": history or None,
        "log": training_curve(Path(cfg.out) / "log.jsonl"),
        "arithmetic": results["arithmetic"],
    }


def training_curve(log: Path, rows: int = LOG_ROWS) -> list[dict]:
    """The run's log.jsonl thinned to about `rows` evenly spaced steps (the last always kept), the monitor's
    entries left out (cell.json has them): the loss, the lr and the method's own numbers (the energy's alpha)
    for a cell whose run folder is removed once it is scored."""
    steps = [json.loads(line) for line in log.read_text().splitlines()] if log.is_file() else []
    stride = max(1, -(-len(steps) // rows))
    kept = steps[stride - 1 :: stride] + ([steps[-1]] if steps and len(steps) % stride else [])
    return [{k: v for k, v in row.items() if k != "monitor"} for row in kept]


def short_run(arm: Arm, steps: int, budget: float, unit: str) -> ParameterError:
    return ParameterError(
        f"the arm '{arm.name}' ends after {steps} steps (epochs={arm.overrides.get('epochs')}), before its budget "
        f"of {budget_name(budget)} {unit}; give the arm more epochs or the comparison a smaller budget."
    )


def untrained(study, arm: Arm, seed: int, folder: Path) -> dict:
    """The random-init row: a checkpoint of the energy method's backbone before any step (the seed sets its
    initialisation; a ViT's positions are what the arm's `positions` resolves to, the sin-cos table by default, as
    the energy's and MAE's pretraining start from, so the row measures what pretraining adds to the table)."""
    path = folder / "m0" / "checkpoint.pt"
    path.parent.mkdir(parents=True, exist_ok=True)
    Pretrainer(pretrain_config(study, arm, seed, folder / "run")).save(path)
    return {"snapshots": {"0": {"steps": 0, "seconds": 0.0}}, "monitor": None}


def settings(study, arm: Arm) -> dict:
    """What a cached cell's numbers depend on besides its budgets, seed and fine-tune epochs: of shards also the
    images read of each split, of a budget in steps its unit (minutes, the other, is named by no key)."""
    streamed = {"max_images": study.max_images} if is_stream(study.data) else {}
    return {
        "backbone": study.backbone,
        "data": str(study.data),
        "img_size": study.img_size,
        "batch_size": study.batch_size,
        "clock": clock_kind(study),
        **({"budget": "steps"} if study.unit == "steps" else {}),
        "method": arm.method,
        "overrides": arm.overrides,
        **streamed,
        **recorded_auto(study, arm),
    }


def recorded_auto(study, arm: Arm) -> dict:
    """What an energy arm's loss and positions, and the AE's, SimMIM's and the random-init row's positions, resolve
    to where the arm names none (`auto`): a cell records what it measured, so one cached under another resolution
    is refused."""
    if arm.method not in ("energy", "ae", "simmim", None):
        return {}
    cfg = pretrain_config(study, arm, 0, Path("."))
    resolved = resolve_auto(cfg.backbone, cfg.img_size, pretexts.create_pretext(cfg.task, **cfg.task_args))
    keys = ("loss", "positions") if arm.method == "energy" else ("positions",)  # only the energy has this loss
    recorded = {key: resolved[key] for key in keys if cfg.method_args.get(key, "auto") == "auto"}
    if arm.method in ("ae", "simmim") and recorded.get("positions") == "learned":
        del recorded["positions"]  # nothing to set on such a backbone: its cells measured what they always did
    return recorded


def claim(folder: Path) -> bool:
    """Take the cell for this process; False if another live process has it (a claim left by a killed run is free,
    one holding this process's own pid too: a restarted container often gets its killed run's pid)."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "claim"
    try:
        pid = int(path.read_text())
        if pid != os.getpid() and process_alive(pid):
            return False
    except (FileNotFoundError, ValueError):
        pass
    path.write_text(str(os.getpid()))
    return True


def run_cell(study, arm: Arm, seed: int, folder: Path, keep_checkpoints: bool = False, stop=None) -> dict | None:
    """The cell's record (pretraining points, probes, fine-tunes), read from `folder` where done before; None when
    another process is running it. A cell stopped by a signal raises `Interrupted` and keeps what it had on disk:
    the same call continues it."""
    if study.threads:
        torch.set_num_threads(study.threads)
    if not claim(folder):
        return None
    try:
        return cell_results(study, arm, seed, folder, keep_checkpoints, stop)
    finally:
        (folder / "claim").unlink(missing_ok=True)


def load_cell(path: Path, expected: dict | None = None) -> dict:
    """A cached cell; one measured under other settings is refused."""
    cell = json.loads(path.read_text())
    cell.setdefault("finetunes", {})
    changes = setting_changes(cell, expected)
    if changes:
        raise OutputError(
            f"{path} was measured with other settings ({changes_text(changes)}); give --force to measure again, "
            "or another --out."
        )
    return cell


# a cell's settings key -> the option of `pretexts compare` that sets it
OPTION_OF = {
    "backbone": "--backbone",
    "data": "--data",
    "img_size": "--img-size",
    "batch_size": "--batch-size",
    "clock": "--clock",
    "max_images": "--max-images",
}


def setting_changes(cell: dict, expected: dict | None) -> list[tuple]:
    """(key, the cell's value, the asked value) for each setting (settings()) `cell` was measured with otherwise;
    [] where they agree or nothing is expected, [(None, None, None)] where the cell records none."""
    wanted = None if expected is None else json.loads(json.dumps(expected))
    saved = cell.get("settings")
    if wanted is None or saved == wanted:
        return []
    if saved is None:
        return [(None, None, None)]
    keys = sorted(k for k in {*wanted, *saved} if saved.get(k) != wanted.get(k))  # one either lacks too
    return [(key, saved.get(key), wanted.get(key)) for key in keys]


def changes_text(changes: list[tuple]) -> str:
    """'--batch-size 64, asked 32': each change as a user would set it back."""
    parts = []
    for key, was, asked in changes:
        if key is None:
            parts.append("it records none")
        elif key == "budget":  # only a budget in steps is recorded: no key is minutes
            parts.append(f"a budget in {was or 'minutes'}, asked in {asked or 'minutes'}")
        else:
            parts.append(f"{OPTION_OF.get(key, key)} {shown(was)}, asked {shown(asked)}")
    return "; ".join(parts)


def shown(value) -> str:
    if value is None:
        return "none"
    return str(value) if isinstance(value, (str, int, float)) else json.dumps(value, sort_keys=True)


def cell_results(study, arm: Arm, seed: int, folder: Path, keep_checkpoints: bool, stop=None) -> dict:
    """Pretrain (or continue a stopped pretraining), score each budget's snapshot (probes; of a pretrained arm also
    its held-out ratio and top-component share, point_measures.py) and fine-tune the last, writing cell.json after
    each phase; `stop` (a `StopSignals`) raises `Interrupted` after the pretraining and between
    points when it was asked."""
    done_file = folder / "cell.json"
    wanted = settings(study, arm)
    cell = load_cell(done_file, wanted) if done_file.is_file() else {"points": {}, "finetunes": {}}
    cell["settings"] = wanted
    marks = [0.0] if arm.method is None else sorted(study.budgets)
    budgets = {budget_name(m): m for m in marks}  # a point's name in cell.json: its minutes (or steps)
    top = budget_name(marks[-1])
    snapshot = {key: folder / f"m{key}" / "checkpoint.pt" for key in budgets}
    tune = study.finetune_epochs and not tuned_as_asked(cell["finetunes"].get(top, {}), study)
    missing = [key for key in budgets if "knn_std" not in cell["points"].get(key, {})]
    # a point pretrained before a stop has its steps in cell.json and its snapshot on disk: it is only scored now
    unsnapped = [key for key in missing if not ("steps" in cell["points"].get(key, {}) and snapshot[key].is_file())]
    if unsnapped or (tune and not snapshot[top].is_file()):
        pre = (
            untrained(study, arm, seed, folder)
            if arm.method is None
            else pretrain(study, arm, seed, folder, sorted({*(budgets[k] for k in unsnapped), marks[-1]}))
        )
        for key in missing:
            cell["points"][key] = dict(pre["snapshots"][key])
        cell["points"] = dict(sorted(cell["points"].items(), key=lambda kv: float(kv[0])))
        if top in missing:  # the monitor and the log belong beside the points of the run that made them
            if pre.get("monitor"):
                cell["monitor"] = pre["monitor"]
            if pre.get("log"):
                cell["log"] = pre["log"]
            if pre.get("arithmetic"):  # the energy's cells repeat only on the same (engine/training/arithmetic.py)
                cell["arithmetic"] = pre["arithmetic"]
        write_json(done_file, cell)
        if stop is not None and stop.requested:  # caught by the pretraining too late to stop it: stop here
            phase = "pretraining" if arm.method else "building the random-init start"
            raise Interrupted(stop.signal.name, stop.exit_code, phase)
    measures = PointMeasures(pretrain_config(study, arm, seed, folder / "run")) if arm.method else None
    for key in missing:  # each point's held-out ratio and top share are its own snapshot's, cached or not
        scores = probe(study, snapshot[key], seed)
        cell["points"][key].update({**scores, **(measures(snapshot[key]) if measures else {})})
        write_json(done_file, cell)
        if stop is not None and stop.requested:
            raise Interrupted(stop.signal.name, stop.exit_code, "scoring")
    if tune:  # from this run's snapshot, a kept one, or (not kept) a second run at the same budget
        start_steps = load_checkpoint(snapshot[top], kinds=("pretrain",))["global_step"]
        cell["finetunes"][top] = {**finetune(study, snapshot[top], seed), "start_steps": start_steps}
        write_json(done_file, cell)
    if not keep_checkpoints:  # the record is cell.json; the rest is tens of MB a cell
        for path in [*folder.glob("m*"), folder / "run"]:
            shutil.rmtree(path, ignore_errors=True)
    return cell
