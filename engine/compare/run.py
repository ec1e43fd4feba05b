"""`pretexts compare`: run every cell of a comparison (engine/compare/cells.py), then rank them
(report.py). OUT holds the cells (OUT/cells/BACKBONE/ARM/seedS/cell.json), so the same command run again
after an interruption resumes where it stopped; --force starts over."""

import dataclasses
import json
import shutil
from collections.abc import Callable
from pathlib import Path

from pretexts.engine.compare.cells import arms_for, clock_kind, run_cell
from pretexts.engine.compare.config import CompareConfig
from pretexts.engine.compare.report import plot, summarise, table
from pretexts.engine.training.run_folder import RunLock, claim_output_dir, write_json, write_text

OUTPUTS = ("compare.json", "compare.md", "compare.png")


def claim_compare_dir(out: Path, force: bool, inputs) -> None:
    """A folder holding another command's run is refused (without --force); one holding an earlier comparison is
    continued, its cells reused, or with --force emptied of them first."""
    claim_output_dir(out, None, force, inputs=inputs, resumable=False)
    if force:
        shutil.rmtree(out / "cells", ignore_errors=True)
        for name in OUTPUTS:
            (out / name).unlink(missing_ok=True)


def compare(cfg: CompareConfig, echo: Callable[[str], None] = print) -> dict:
    """Every cell of the comparison (cached ones read back), then the ranked table, the plot and compare.json;
    returns {'rows': ..., 'cells': ...}."""
    out = Path(cfg.out)
    with RunLock(out, "compare"):
        claim_compare_dir(out, cfg.force, inputs=[cfg.data])
        arms = arms_for(cfg.tasks, cfg.methods)
        todo = [(arm, seed) for arm in arms for seed in cfg.seeds]
        say = (lambda line: None) if cfg.quiet else echo
        say(
            f"comparing {len(arms) - 1} pairs and random init on {cfg.backbone}, '{cfg.data}': {len(todo)} cells, "
            f"budget {', '.join(f'{b:g}' for b in cfg.budget)} min ({clock_kind(cfg)} clock) -> {out}"
        )
        cells = {}
        for i, (arm, seed) in enumerate(todo, 1):
            folder = out / "cells" / cfg.backbone / arm.folder / f"seed{seed}"
            cached = (folder / "cell.json").is_file()
            cell = run_cell(cfg, arm, seed, folder)
            if cell is None:
                say(f"[{i}/{len(todo)}] {arm.name}, seed {seed}: another process is running it; skipped")
                continue
            cells[(arm.name, seed)] = cell
            top = cell["points"][max(cell["points"], key=float)]
            say(
                f"[{i}/{len(todo)}] {arm.name}, seed {seed}{' (cached)' if cached else ''}: kNN {top['knn']:.2f}, "
                f"linear {top['linear']:.2f}"
            )
        rows = summarise(cells, cfg.budget, cfg.finetune_epochs)
        text = table(rows, cfg.rank_by, clock_kind(cfg))
        echo(text)
        write_text(out / "compare.md", text + "\n")
        plot(
            rows,
            cfg.rank_by,
            out / "compare.png",
            f"{cfg.backbone} on '{cfg.data}', {len(cfg.seeds)} seed(s): "
            f"features after {max(cfg.budget):g} min of pretraining",
        )
        record = {
            "config": dataclasses.asdict(cfg),
            "rows": rows,
            "cells": {f"{name} / seed {seed}": cell for (name, seed), cell in cells.items()},
        }
        write_json(out / "compare.json", json.loads(json.dumps(record)))
        echo(f"wrote {out}/: compare.md, compare.png, compare.json, cells/")
        return record
