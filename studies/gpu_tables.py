"""The GPU step-cost tables of docs/results/gpu-h100.md, read from the committed outputs of `benchmarks/throughput.py`,
and the module `pretexts list --backbones` prints its costs from (pretexts/cli/step_costs.py). Used by tables.py.

- `step-cost`: the H100 session of 2026-11-25 (`throughput.py --paper-sizes`, one file), with autograd's and the
  rewritten convolution double backward side by side.
- `step-cost-h200`: the H200 session of 2026-11-28 (`benchmarks/gpu_session.py`, one file per table), with TF32 on
  (the package's default on CUDA) and, for two backbones, off. The CLI's costs come from this one: the newest
  measurement, taken with the package's defaults.
"""

import re
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
H100_TABLE = ROOT / "benchmarks" / "results" / "gpu-h100-2026-11-25" / "paper_sizes.txt"
H200_SESSION = ROOT / "benchmarks" / "results" / "gpu-h200-2026-11-28"

HEADER = re.compile(r"^(\w+) at (\d+) px, batch (\d+),")
COMPILED = re.compile(r"^compiled / eager, energy N=2 exact \+ bf16 autocast: ([\d.]+)$")
COMPILE_COST = re.compile(r"^  compile time (-?[\d.]+) s; (?:repaid after (\d+) steps|never repaid)")
NAMES = {
    "vit_small": "ViT-S/16",
    "vit_base": "ViT-B/16",
    "swin_t": "Swin-T",
    "convnext_t": "ConvNeXt-T",
    "resnet50": "ResNet-50",
}
ROW_KEYS = {
    "supervised (CE, linear classifier)": "fp32",
    "supervised + bf16 autocast": "supervised",
    "energy N=2 exact, autograd's conv double backward + bf16 autocast": "autograd",
    "energy N=2 exact, rewritten conv double backward + bf16 autocast": "exact",
    "energy N=2 exact, autograd's double backward + bf16 autocast": "autograd",
    "energy N=2 exact, rewritten double backward + bf16 autocast": "exact",
    "energy N=2 exact + bf16 autocast": "exact",
    "energy N=2 finite-difference + bf16 autocast": "fd",
}


def parsed(text: str) -> list[dict]:
    """Each table in throughput.py's output: {"backbone", "size", "batch", row key: (ms, peak MiB)}; a row the
    machine refused (finite differences on BatchNorm) is left out."""
    rows, current = [], None
    for line in text.splitlines():
        if match := HEADER.match(line):
            current = {"backbone": NAMES[match[1]], "size": int(match[2]), "batch": int(match[3])}
            rows.append(current)
        elif current and line.startswith("| ") and not line.startswith("| step"):
            cells = [c.strip() for c in line.strip("|").split("|")]
            if cells[0] in ROW_KEYS and re.fullmatch(r"[\d.]+", cells[1]):
                current[ROW_KEYS[cells[0]]] = (float(cells[1]), cells[3])
    return rows


def h100_rows() -> list[dict]:
    return parsed(H100_TABLE.read_text())


def h200_rows(tf32: bool = True) -> list[dict]:
    """The H200 session's tables, batch 32 then 128 per backbone, TF32 on or off (what was measured of it)."""
    rows = []
    for backbone in NAMES:
        for batch in (32, 128):
            path = H200_SESSION / f"{backbone}-{batch}{'' if tf32 else '-no-tf32'}.txt"
            rows += parsed(path.read_text()) if path.is_file() else []
    return rows


def compiled_rows(session: Path) -> list[dict]:
    """The exact step compiled beside it eager, from a GPU session's `*-128-compiled.txt` items (named by their
    backbone; the batch from the table's header): {"backbone", "batch", "eager", "compiled" (ms), "gain" (compiled /
    eager), "compile_s", "repaid_after" (steps, None where never)}."""
    rows = []
    for backbone in NAMES:
        path = session / f"{backbone}-128-compiled.txt"
        lines = path.read_text().splitlines() if path.is_file() else []
        header = next((m for line in lines if (m := HEADER.match(line))), None)
        at = next((i for i, line in enumerate(lines) if COMPILED.match(line)), None)
        if header is None or at is None:  # cut short before its table: nothing measured
            continue
        cost = COMPILE_COST.match(lines[at + 1])  # the break-even line under its ratio
        cells = [[c.strip() for c in line.strip("|").split("|")] for line in lines if line.startswith("| energy")]
        times = {row[0]: float(row[1]) for row in cells}
        rows.append(
            {
                "backbone": NAMES[backbone],
                "batch": int(header[3]),
                "gain": float(COMPILED.match(lines[at])[1]),
                "eager": times["energy N=2 exact + bf16 autocast"],
                "compiled": next(ms for name, ms in times.items() if "compile" in name),
                "compile_s": float(cost[1]),
                "repaid_after": int(cost[2]) if cost[2] else None,
            }
        )
    return rows


def timed(row: dict | None, key: str, bold: bool = False) -> str:
    """'249 ms, 5.9x' against the bf16 supervised step of the same batch and run."""
    if row is None:
        return "-"
    if key not in row:
        return "refused (BatchNorm, ReLU)"
    text = f"{row[key][0]:.0f} ms, {row[key][0] / row['supervised'][0]:.1f}x"
    return f"**{text}**" if bold else text


def peaks(row: dict) -> str:
    return " / ".join(row[k][1] if k in row else "-" for k in ("supervised", "exact", "fd"))


def step_cost_table() -> str:
    lines = [
        "| backbone, batch | supervised fp32 / bf16 ms | exact, autograd's conv double backward "
        "| exact, rewritten (default) | finite-difference | peak MiB: supervised bf16 / exact / fd |",
        "|---|---|---|---|---|---|",
    ]
    for r in h100_rows():
        conv = r["backbone"].startswith(("ConvNeXt", "ResNet"))  # where the rewrite is what makes the step cheap
        lines.append(
            f"| {r['backbone']}, {r['batch']} | {r['fp32'][0]:.1f} / {r['supervised'][0]:.1f} "
            f"| {timed(r, 'autograd')} | {timed(r, 'exact', bold=conv)} | {timed(r, 'fd')} | {peaks(r)} |"
        )
    caption = (
        "One H100, bf16 autocast, 224 px, median of 3 interleaved steps; each step against the bf16 supervised step "
        f"of the same batch. From `{H100_TABLE.relative_to(ROOT)}`, generated by `python studies/tables.py`."
    )
    return "\n".join([*lines, "", textwrap.fill(caption, 116)])


def h200_table() -> str:
    lines = [
        "| backbone, batch | supervised fp32 / bf16 ms | exact | finite-difference | finite-difference, TF32 off "
        "| peak MiB: supervised bf16 / exact / fd |",
        "|---|---|---|---|---|---|",
    ]
    off = {(r["backbone"], r["batch"]): r for r in h200_rows(tf32=False)}
    for r in h200_rows():
        lines.append(
            f"| {r['backbone']}, {r['batch']} | {r['fp32'][0]:.1f} / {r['supervised'][0]:.1f} | {timed(r, 'exact')} "
            f"| {timed(r, 'fd')} | {timed(off.get((r['backbone'], r['batch'])), 'fd')} | {peaks(r)} |"
        )
    caption = (
        "One H200, bf16 autocast, TF32 on unless marked, 224 px, median of 3 interleaved steps; each step against "
        "the bf16 supervised step of the same batch and run. From the tables in "
        f"`{H200_SESSION.relative_to(ROOT)}/`, generated by `python studies/tables.py`."
    )
    return "\n".join([*lines, "", textwrap.fill(caption, 116)])


def step_costs_module() -> str:
    """pretexts/cli/step_costs.py: the exact step against a supervised one per backbone at batch 32 and 128."""
    costs: dict[str, dict] = {}
    for r in h200_rows():
        costs.setdefault(r["backbone"], {})[r["batch"]] = round(r["exact"][0] / r["supervised"][0], 1)
    return (
        '"""The energy method\'s exact step (N=2) against a bf16 supervised step of the same batch, measured on one\n'
        "H200 at 224 px with the package's CUDA defaults (docs/results/gpu-h100.md). Generated from that page's\n"
        'measured table: do not edit (a test fails when the two differ)."""\n\n'
        'MEASURED_ON = "one H200 in bf16 at 224 px"\n\n'
        "EXACT_OVER_SUPERVISED = {\n"
        + "".join(f"    {name!r}: {by_batch!r},\n" for name, by_batch in costs.items()).replace("'", '"')
        + "}\n"
    )
