"""The tables that README.md and the docs quote, generated from the committed cells and benchmark results, so that a
number cannot drift between pages. Each table sits between two marker lines in its pages:

    <!-- begin generated: NAME -->
    ... (written by this script) ...
    <!-- end generated: NAME -->

    python studies/tables.py            # rewrite every generated block (and the CLI's step-cost module)
    python studies/tables.py --check    # exit 1 naming each block that differs from the cells (a test runs this)

Tables: `verdict` (does it work: fine-tuned top-1 of the energy start against the strongest peer and random init),
`step-cost` and `step-cost-h200` (the energy's exact step against a supervised step on a GPU, gpu_tables.py; the
newest is what `pretexts list --backbones` prints, from pretexts/cli/step_costs.py, written here too), `length`
(fine-tuned score against pretraining steps per recipe arm, length/report.py, which also draws its plot).
"""

import argparse
import json
import os
import re
import statistics
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path

# gpu_tables beside this file and the length study's report, also when this file is loaded by path
HERE = Path(__file__).resolve().parent
sys.path[:0] = [str(HERE), str(HERE / "length")]
from gpu_tables import h200_table, step_cost_table, step_costs_module  # noqa: E402
from report import VIT_DEFAULT, length_table  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CELLS = ROOT / "studies" / "representation" / "cells"
LENGTH_CELLS = ROOT / "studies" / "length" / "cells"
STEP_COSTS = ROOT / "pretexts" / "cli" / "step_costs.py"
PAGES = {
    "verdict": ["README.md", "docs/results/index.md", "docs/results/representation.md"],
    "step-cost": ["docs/results/gpu-h100.md"],
    "step-cost-h200": ["docs/results/gpu-h100.md"],
    "length": ["docs/results/length.md"],
}


@dataclass(frozen=True)
class Score:
    """Cells `<root>/<cache>/<backbone>/<arm>/seed*/cell.json` fine-tuned from the snapshot at `key` (the root: the
    representation study's cells unless given)."""

    label: str
    cache: str
    backbone: str
    arm: str
    key: str
    root: Path = CELLS

    def finetunes(self) -> list[dict]:
        cells = sorted((self.root / self.cache / self.backbone / self.arm).glob("seed*/cell.json"))
        tunes = [json.loads(p.read_text())["finetunes"].get(self.key) for p in cells]
        return [t for t in tunes if t and t.get("epochs") == 15]

    def mean_std(self) -> tuple[float, float, int]:
        finals = [t["final"] for t in self.finetunes()]
        if not finals:
            raise SystemExit(f"no 15-epoch fine-tune of {self} in {self.root}")
        return statistics.mean(finals), statistics.stdev(finals) if len(finals) > 1 else 0.0, len(finals)

    def precision(self) -> str:
        return "/".join(sorted({t.get("precision", "fp32") for t in self.finetunes()}))


@dataclass(frozen=True)
class Row:
    backbone: str
    budget: str
    energy: Score
    peers: tuple[Score, ...]
    random: Score


def rand(backbone: str) -> Score:
    if backbone == "vit_tiny":  # a ViT starts from the sin-cos table, as the energy and MAE do: one step at lr 4e-6
        return Score("random init, sin-cos table", "steps1", backbone, "energy-centred-sincos", "1")
    return Score("random init", "minutes", backbone, "random", "0")


VIT = "vit_tiny"


def convnext_row(minutes: str, peers: tuple[str, ...]) -> Row:
    """convnext_atto after `minutes` CPU-minutes, against the named peers' cells of the same minutes."""
    folders = {"SimMIM": "simmim", "AE": "ae"}
    return Row(
        "convnext_atto",
        f"{minutes} CPU-minutes",
        Score("energy", "minutes", "convnext_atto", "energy", minutes),
        tuple(Score(p, "minutes", "convnext_atto", folders[p], minutes) for p in peers),
        rand("convnext_atto"),
    )


# MAE's cells measured again since its decoder takes the class token, by budget; the others are marked
MAE_CLASS_TOKEN = {"250": "mae-class-token/steps250"}
UNTRAINED_TOKEN = "MAE†"  # measured before: its class-token output, the fine-tune's start, was never trained


def mae(cache: str, key: str) -> Score:
    """MAE's cells at `key`: those measured with the class token trained where there are some."""
    if key in MAE_CLASS_TOKEN:
        return Score("MAE", MAE_CLASS_TOKEN[key], VIT, "mae", key)
    return Score(UNTRAINED_TOKEN, cache, VIT, "mae", key)


def vit_row(budget: str, cache: str, key: str, mae_cache: str | None = None) -> Row:
    """vit_tiny's default against MAE at one budget (`cache` holds both unless MAE's lies in `mae_cache`)."""
    return Row(VIT, budget, Score("energy", cache, VIT, VIT_DEFAULT, key), (mae(mae_cache or cache, key),), rand(VIT))


def cosine_row(steps: int, mae_steps: int) -> Row:
    """vit_tiny's default past 200 steps (the fast recipe, its lr decayed) from the length study's cells, against
    MAE's cached cells at the nearest budget (named where it is not the same), whose lr stayed constant."""
    return Row(
        VIT,
        f"{steps} steps, energy's lr decayed" + (f" (MAE {mae_steps})" if mae_steps != steps else ""),
        Score("energy", "", VIT, f"fast-cosine-{steps}", str(steps), root=LENGTH_CELLS),
        (mae(f"steps{mae_steps}", str(mae_steps)),),
        rand(VIT),
    )


VERDICT_ROWS = (
    convnext_row("5", ("SimMIM", "AE")),
    convnext_row("15", ("AE",)),
    convnext_row("30", ("SimMIM",)),
    vit_row("100 steps", "steps100", "100"),
    vit_row("250 steps, constant lr", "steps250", "250"),
    vit_row("544 steps, constant lr", "steps544", "544"),
    # the default since `--schedule auto` (a ViT's long run decays its lr): the length study's cells
    cosine_row(252, 250),
    cosine_row(567, 544),
    cosine_row(1008, 1008),
    vit_row("15 CPU-minutes", "fp32", "15", mae_cache="minutes"),  # MAE's 15 minutes were fine-tuned in bf16
)


def shown(score: Score) -> str:
    mean, std, n = score.mean_std()
    return f"{mean:.1f} +- {std:.1f} ({n}{', bf16' if score.precision() != 'fp32' else ''})"


def leader(scores: list[Score]) -> str:
    """Who leads: the best mean, unless the runner-up is within the larger of their two standard deviations."""
    ranked = sorted(scores, key=lambda s: -s.mean_std()[0])
    (best, best_std, _), (second, second_std, _) = ranked[0].mean_std(), ranked[1].mean_std()
    if best - second <= max(best_std, second_std):
        return f"{ranked[0].label} and {ranked[1].label} level"
    return f"{ranked[0].label} leads"


def verdict_table() -> str:
    lines = [
        "| backbone | pretraining | energy | strongest peer | random init | verdict |",
        "|---|---|---|---|---|---|",
    ]
    for row in VERDICT_ROWS:
        peer = max(row.peers, key=lambda s: s.mean_std()[0]) if row.peers else None
        peer_cell = f"{peer.label} {shown(peer)}" if peer else "not run"
        scores = [row.energy, row.random] + ([peer] if peer else [])
        lines.append(
            f"| {row.backbone} | {row.budget} | {shown(row.energy)} | {peer_cell} | {shown(row.random)} "
            f"| {leader(scores)} |"
        )
    caption = (
        "Fine-tuned top-1 (%) on 1,017 held-out CIFAR-10 images after pretraining on 4,068 at 32 px and a 15-epoch "
        "fine-tune; mean +- std (seeds). A ViT's random init starts from the same sin-cos position table as its "
        "energy and MAE starts. CPU-minutes are minutes of one thread: equal compute, not equal steps. Fine-tunes in "
        "fp32 unless marked bf16. Past 200 steps the fast recipe now decays the energy's lr on a ViT (`--schedule "
        "auto`); MAE's lr stayed constant in every row, and the rows marked constant lr kept the energy's constant "
        f"too. {UNTRAINED_TOKEN}: MAE measured before its decoder took the class token, so the class-token output "
        "the fine-tune starts from was never trained; MAE's 250-step cells were measured again with it. Leads: ahead "
        "by more than the larger std. Generated from the committed cells by `python studies/tables.py`."
    )
    return "\n".join([*lines, "", textwrap.fill(caption, 116)])


# ---- the pages --------------------------------------------------------------------------------------------------
TABLES = {
    "verdict": verdict_table,
    "step-cost": step_cost_table,
    "step-cost-h200": h200_table,
    "length": length_table,
}


def block(name: str) -> re.Pattern:
    return re.compile(
        rf"(<!-- begin generated: {re.escape(name)} -->\n)(.*?)(<!-- end generated: {re.escape(name)} -->)", re.S
    )


def rendered(text: str, name: str, table: str) -> str:
    pattern = block(name)
    if not pattern.search(text):
        raise SystemExit(f"no '<!-- begin generated: {name} -->' block")
    return pattern.sub(lambda m: m[1] + table + "\n" + m[3], text)


def outputs() -> dict[Path, str]:
    """Every generated file's whole text as it should be."""
    wanted = {STEP_COSTS: step_costs_module()}
    for name, make in TABLES.items():
        table = make()
        for page in PAGES[name]:
            path = ROOT / page
            wanted[path] = rendered(wanted.get(path, path.read_text()), name, table)
    return wanted


def stale() -> list[Path]:
    """The generated files that differ from the cells (missing counts as different)."""
    return [path for path, text in outputs().items() if not path.is_file() or path.read_text() != text]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="change nothing: exit 1 if a generated block is stale")
    args = parser.parse_args()
    if args.check:
        if differ := stale():
            names = ", ".join(os.path.relpath(p, ROOT) for p in differ)
            sys.exit(f"generated tables differ from the cells in {names}: run `python studies/tables.py`")
        return
    for path, text in outputs().items():
        if not path.is_file() or path.read_text() != text:
            path.write_text(text)
            print(f"wrote {os.path.relpath(path, ROOT)}")


if __name__ == "__main__":
    main()
