"""`pretexts compare`: every pair pretrained for the budget and scored beside random init, one ranked table, cells
cached so an interrupted comparison resumes, and bad requests refused in one line."""

import json

import pytest
import torch
from cli_runs import (  # noqa: F401 (one_torch_thread: a fixture)
    copy_sample_images,
    fails_cleanly,
    one_torch_thread,
    run_cli,
    tiny_image_folder,
)

from pretexts.engine.compare import cells as compare_cells
from pretexts.engine.evaluation import finetune as finetune_module
from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.engine.training.precision import autocast
from pretexts.errors import OutputError

# tiny and fast: a 0.2M-parameter ConvNeXt, 32 training images, budgets of about one second of CPU
BASE = ["compare", "--backbone", "test_convnext", "--batch-size", "8", "--budget", "0.015", "--threads", "1"]


@pytest.fixture(scope="module")
def comparison(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    data = tiny_image_folder(root / "data")
    out = root / "out"
    result, error = run_cli(
        [
            *BASE,
            "--data",
            data,
            "--tasks",
            "random-mask,colorization",
            "--methods",
            "energy",
            "simmim",
            "--seeds",
            "0",
            "1",
            "--out",
            out,
        ]
    )  # lists as `--seeds 0 1` or repeated
    assert result.exit_code == 0, error or result.output
    return data, out, result.output


def table_rows(markdown: str) -> list[list[str]]:
    """The markdown table's rows (the tie rule follows it after a blank line)."""
    table = markdown.split("\n\n")[0]
    return [[c.strip() for c in line.strip("|").split("|")] for line in table.splitlines()[2:]]


def test_every_pair_and_random_init_are_ranked_by_the_chosen_score(comparison):
    _, out, output = comparison
    rows = table_rows((out / "compare.md").read_text())
    names = [row[1] for row in rows]
    # simmim masks on its own: one row whatever the tasks
    assert sorted(names) == ["energy on colorization", "energy on random-mask", "random init", "simmim"]
    # a rank is the row's position, or "=N": tied with the row ranked N (the rule is stated under the table)
    for position, row in enumerate(rows, 1):
        assert row[0] == str(position) or row[0].startswith("=") and 1 <= int(row[0][1:]) < position + 1, rows
    assert "'=' marks a tie" in (out / "compare.md").read_text()
    linear = [float(row[7].split(" +- ")[0]) for row in rows]  # rank, name, minutes, seeds, steps, kNN, std, linear
    assert linear == sorted(linear, reverse=True)
    assert all(row[3] == "2" for row in rows)  # both seeds in every row
    random_row = rows[names.index("random init")]
    assert random_row[2] == "0" and random_row[4] == "0"
    assert (out / "compare.png").stat().st_size > 0
    assert any(line.startswith("wrote ") for line in output.splitlines()[-2:])  # the last line, wrapped at 100
    assert (out / "compare.csv").read_text().count("\n") == 5  # the header and the 4 rows
    record = json.loads((out / "compare.json").read_text())
    assert len(record["cells"]) == 8 and record["config"]["rank_by"] == "linear"


def test_the_plan_and_its_estimate_come_before_the_first_cell_and_an_eta_after_each(comparison):
    """A study of hours must say what it will cost before it starts, and how far it has got as it goes."""
    _, _, output = comparison
    lines = output.splitlines()
    plan = next(i for i, line in enumerate(lines) if line.startswith("plan: "))
    estimate = next(i for i, line in enumerate(lines) if line.startswith("estimate: about "))
    first = next(i for i, line in enumerate(lines) if line.startswith("[1/8]"))
    assert plan < estimate < first
    assert "8 cells (6 to pretrain, 2 random init, 0 cached)" in " ".join(lines[plan:estimate])
    assert "Modelled, not measured" in " ".join(lines[estimate:first])
    cells = [line for line in lines if line.startswith("[")]
    assert len(cells) == 8 and all("; ETA " in line for line in cells[:-1]) and "ETA" not in cells[-1]


def test_the_terminal_table_fits_100_columns_and_says_its_tie_rule(comparison):
    _, _, output = comparison
    lines = output.splitlines()
    table = lines[next(i for i, line in enumerate(lines) if line.startswith("rank ")) : -1]
    assert len(table) >= 5 and max(map(len, lines)) <= 100, output  # the table and every other line
    assert "'=' marks a tie" in " ".join(table)


def test_the_compare_probe_gives_the_numbers_of_pretexts_probe(tmp_path):
    """The compare's probes read images decoded once for all its cells; the numbers are `pretexts probe`'s."""
    from pretexts.engine.compare.config import CompareConfig
    from pretexts.engine.compare.inputs import forget
    from pretexts.engine.evaluation.probe import run_probe
    from pretexts.engine.evaluation.probe_config import ProbeConfig

    data = tmp_path / "data"
    copy_sample_images(data / "train", 16)
    copy_sample_images(data / "val", 8, split="val")
    study = CompareConfig(backbone="test_convnext", data=str(data), batch_size=8, out=str(tmp_path / "out"))
    compare_cells.untrained(study, compare_cells.Arm(compare_cells.RANDOM, None), 3, tmp_path / "cell")
    checkpoint = tmp_path / "cell" / "m0" / "checkpoint.pt"
    forget()
    shared = [compare_cells.probe(study, checkpoint, 3) for _ in range(2)]  # the second from decoded images
    alone = run_probe(
        ProbeConfig(
            checkpoint=str(checkpoint),
            data=str(data),
            probes=("knn", "knn-std", "linear"),
            probe_args={"knn_k": (20,)},
            seed=3,
            workers=0,
            quiet=True,
            out=str(tmp_path / "probe"),
        ),
        echo=lambda line: None,
    )
    expected = {"knn": alone["knn"]["k=20"], "knn_std": alone["knn-std"]["k=20"], "linear": alone["linear"]["top1"]}
    assert shared[0] == shared[1] == {**expected, "val_images": 16}


def test_a_new_cell_records_its_runs_held_out_ratio_monitor_and_arithmetic(comparison):
    """Beside the probed points, a masking cell's first run leaves the held-out restored / corrupted ratio where it
    ended and the monitor's history: the table's ratio column and the monitor figure read them. It records the
    arithmetic it ran on, the only place an energy cell repeats bit for bit."""
    _, out, _ = comparison
    cells = [json.loads(p.read_text()) for p in sorted(out.rglob("energy__random-mask/**/cell.json"))]
    assert len(cells) == 2
    for cell in cells:
        [point] = cell["points"].values()
        assert 0 < point["held_out_ratio"] < 10 and cell["monitor"] and cell["monitor"][0]["step"] >= 0
        assert cell["arithmetic"]["cpu_capability"] == torch.backends.cpu.get_cpu_capability()
        assert cell["arithmetic"]["processes"] == 1 and cell["arithmetic"]["threads"] >= 1


def test_a_rerun_reads_every_cell_back_instead_of_pretraining(comparison, monkeypatch):
    data, out, _ = comparison
    before = (out / "compare.md").read_text()

    def no_pretraining(*args, **kwargs):
        raise AssertionError("a cached cell was pretrained again")

    monkeypatch.setattr(compare_cells, "pretrain", no_pretraining)
    monkeypatch.setattr(compare_cells, "untrained", no_pretraining)
    result, error = run_cli(
        [
            *BASE,
            "--data",
            data,
            "--tasks",
            "random-mask,colorization",
            "--methods",
            "energy,simmim",
            "--seeds",
            "0",
            "--seeds",
            "1",
            "--out",
            out,
        ]
    )
    assert result.exit_code == 0, error or result.output
    assert result.output.count("(cached)") == 8 and "estimate: nothing to run, every cell is cached" in result.output
    assert (out / "compare.md").read_text() == before


def test_a_cell_measured_under_other_settings_is_not_mixed_in(comparison):
    data, out, _ = comparison
    fails_cleanly(
        [
            *BASE[:3],
            "--batch-size",
            "16",
            *BASE[5:],
            "--data",
            data,
            "--methods",
            "simmim",
            "--seeds",
            "0",
            "--out",
            out,
        ],
        "measured with other settings (--batch-size 8, asked 16): rerun with --batch-size 8",
        "--force",
    )


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--methods", "enrgy"], ["unknown method 'enrgy'", "energy"]),
        (["--tasks", "random-msk"], ["unknown pretext task 'random-msk'", "random-mask"]),
        (["--budget", "0"], ["budget", "10080"]),  # minutes in (0, a week], the bound declared on the option
        (["--rank-by", "finetune"], ["--rank-by finetune needs --finetune-epochs"]),
    ],
)
def test_bad_requests_are_refused_in_one_line(args, expected, tmp_path):
    fails_cleanly([*BASE, *args, "--out", tmp_path / "out"], *expected)


def test_a_folder_holding_another_run_is_refused_without_force(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"a pretraining run")
    fails_cleanly([*BASE, "--out", tmp_path], "already holds a run", "--force")
    assert (tmp_path / "checkpoint.pt").read_bytes() == b"a pretraining run"


def test_a_cell_keeping_other_budgets_reports_only_the_asked_ones():
    """A cache shared by several studies holds other budgets' points and fine-tunes of other lengths; the table
    reports the asked budgets (and random init's 0) and only fine-tunes of the asked length."""
    from pretexts.engine.compare.report import summarise

    def cell(seed):
        point = {"steps": 10, "knn": 30.0 + seed, "knn_std": 31.0, "linear": 32.0}
        return {
            "points": {"2": point, "5": point, "15": point},
            "finetunes": {"5": {"final": 40.0 + seed, "epochs": 15}, "15": {"final": 35.0, "epochs": 5}},
        }

    cells = {("energy", s): cell(s) for s in (0, 1)}
    cells[("random init", 0)] = {"points": {"0": {"steps": 0, "knn": 34.0, "linear": 33.0}}, "finetunes": {}}
    rows = summarise(cells, budgets=(5, 15), finetune_epochs=15)
    assert [(r["arm"], r["minutes"]) for r in rows] == [("energy", 5.0), ("energy", 15.0), ("random init", 0.0)]
    assert rows[0]["finetune"] == (40.5, pytest.approx(0.7071, abs=1e-4)) and rows[0]["finetune_epochs"] == [15]
    assert rows[1]["finetune"] is None  # a 5-epoch fine-tune is another protocol's
    assert len(summarise(cells)) == 4  # unfiltered: every cached budget


def test_fine_tunes_run_and_are_recorded_in_the_asked_precision(tmp_path, monkeypatch):
    """--finetune-amp bf16 fine-tunes under bf16 autocast and says so in the cell; a rerun asking fp32 does not take
    the bf16 fine-tune from the cache but fine-tunes again."""
    data = tiny_image_folder(tmp_path / "data")
    args = [*BASE, "--data", data, "--methods", "energy", "--finetune-epochs", "1", "--out", tmp_path / "out"]
    seen = []

    def spy(device, dtype):  # the fine-tuner's autocast, for its training and its evaluation steps
        seen.append(dtype)
        return autocast(device, dtype)

    monkeypatch.setattr(finetune_module, "autocast", spy)

    def cell_files():
        return [json.loads(p.read_text()) for p in sorted((tmp_path / "out").rglob("cell.json"))]

    result, error = run_cli([*args, "--finetune-amp", "bf16"])
    assert result.exit_code == 0, error or result.output
    assert [t["precision"] for c in cell_files() for t in c["finetunes"].values()] == ["bf16", "bf16"]
    assert seen and set(seen) == {torch.bfloat16}
    for path in (tmp_path / "out").rglob("cell.json"):  # mark the first run's record, which a rerun must keep
        cell = json.loads(path.read_text())
        cell["monitor"] = [{"step": -1}]
        for point in cell["points"].values():
            point["held_out_ratio"] = -1.0
        path.write_text(json.dumps(cell))
    first = cell_files()
    seen.clear()
    result, error = run_cli([*args, "--finetune-amp", "off"])
    assert result.exit_code == 0, error or result.output
    again = cell_files()
    assert [t["precision"] for c in again for t in c["finetunes"].values()] == ["fp32", "fp32"]
    assert seen and set(seen) == {None}
    # the checkpoints were not kept, so the energy was pretrained again to be fine-tuned: its probed points, held-out
    # ratio and monitor stay the first run's, and the fine-tune says how many steps its own start took
    for before, after in zip(first, again):
        assert after["points"] == before["points"] and after.get("monitor") == before.get("monitor")
    assert sorted(t["start_steps"] > 0 for c in again for t in c["finetunes"].values()) == [False, True]


def test_a_fine_tune_from_a_checkpoint_left_on_disk_records_that_checkpoints_steps(tmp_path, monkeypatch):
    """A study killed while fine-tuning leaves its second pretraining run's checkpoint; the rerun fine-tunes from it
    and records the steps that checkpoint took, not the first run's (which a rerun keeps for the probed points)."""
    data = tiny_image_folder(tmp_path / "data")
    args = [*BASE, "--data", data, "--methods", "energy", "--seeds", "0", "--out", tmp_path / "out"]
    result, error = run_cli(args)  # the first run: probed points, no fine-tune, no checkpoint kept
    assert result.exit_code == 0, error or result.output
    [path] = (tmp_path / "out").rglob("energy*/**/cell.json")

    def killed(*_):
        raise RuntimeError("killed while fine-tuning")

    monkeypatch.setattr(compare_cells, "finetune", killed)
    result, _ = run_cli([*args, "--finetune-epochs", "1"])  # pretrains again, then dies before fine-tuning
    assert result.exit_code != 0
    [left] = path.parent.glob("m*/checkpoint.pt")
    steps = load_checkpoint(left)["global_step"]
    cell = json.loads(path.read_text())
    for point in cell["points"].values():  # the first run's steps, which the left checkpoint did not take
        point["steps"] = -1
    path.write_text(json.dumps(cell))
    monkeypatch.undo()
    result, error = run_cli([*args, "--finetune-epochs", "1"])
    assert result.exit_code == 0, error or result.output
    tuned = json.loads(path.read_text())
    assert [t["start_steps"] for t in tuned["finetunes"].values()] == [steps] and steps > 0
    assert not list(path.parent.glob("m*/checkpoint.pt"))  # used, then removed like any other


def test_loader_workers_and_save_every_reach_the_pretraining_and_do_not_invalidate_cached_cells(tmp_path):
    """--workers feeds a GPU's pretraining and --save-every checkpoints it more often; they change how fast batches
    come and what a kill loses, not what a step computes, so a cell cached with others is the same measurement."""
    from pretexts.engine.compare.config import CompareConfig

    arm = compare_cells.Arm("energy", "energy", {"task": "random-mask"})
    study, fed = CompareConfig(backbone="test_convnext"), CompareConfig(backbone="test_convnext", workers=4)
    saving = CompareConfig(backbone="test_convnext", save_every=5)
    assert compare_cells.pretrain_config(fed, arm, 0, tmp_path).workers == 4
    assert compare_cells.pretrain_config(study, arm, 0, tmp_path).workers == 0
    assert compare_cells.pretrain_config(saving, arm, 0, tmp_path).save_every == 5
    assert compare_cells.pretrain_config(study, arm, 0, tmp_path).save_every is None
    assert compare_cells.settings(fed, arm) == compare_cells.settings(study, arm) == compare_cells.settings(saving, arm)
    fails_cleanly([*BASE, "--workers", "65", "--out", tmp_path], "--workers (workers) must be in [0, 64]")


def test_a_cell_records_what_auto_resolved_to_and_another_resolution_is_refused(tmp_path):
    """An energy arm that names no loss or positions (auto) records what they resolved to, as random init its
    positions; a cell cached under another resolution is measured again, not taken for this one."""
    from pretexts.engine.compare.config import CompareConfig

    vit, cnn = CompareConfig(backbone="vit_tiny", img_size=32), CompareConfig(backbone="test_convnext")
    masking = compare_cells.Arm("energy", "energy", {"task": "random-mask"})
    random_init = compare_cells.Arm(compare_cells.RANDOM, None)
    named = compare_cells.Arm("energy", "energy", {"task": "random-mask", "loss": "mse", "positions": "learned"})

    def resolved(study, arm) -> dict:
        return {k: v for k, v in compare_cells.settings(study, arm).items() if k in ("loss", "positions")}

    assert resolved(vit, masking) == {"loss": "patch-centred", "positions": "sincos"}
    assert resolved(cnn, masking) == {"loss": "mse", "positions": "learned"}
    assert resolved(vit, random_init) == {"positions": "sincos"}
    assert resolved(vit, named) == {}  # named in its overrides, which the settings hold
    ae, simmim = compare_cells.Arm("ae", "ae", {"task": "random-mask"}), compare_cells.Arm("simmim", "simmim")
    assert resolved(vit, ae) == resolved(vit, simmim) == {"positions": "sincos"}  # a cell with learned is refused
    assert resolved(cnn, ae) == {}  # no positions to set on a CNN: its cached cells stand
    for study, arm, changed in [(vit, masking, "loss"), (vit, random_init, "positions"), (vit, ae, "positions")]:
        cached = {**compare_cells.settings(study, arm), changed: "mse" if changed == "loss" else "learned"}
        (tmp_path / "cell.json").write_text(json.dumps({"points": {}, "settings": cached}))
        with pytest.raises(
            OutputError, match=rf"other settings \({changed} {cached[changed]}, asked [\w-]+\); give --force"
        ):
            compare_cells.load_cell(tmp_path / "cell.json", compare_cells.settings(study, arm))
    (tmp_path / "cell.json").write_text(json.dumps({"points": {}}))  # no settings: nothing says what it measured
    with pytest.raises(OutputError, match=r"measured with other settings \(it records none\)"):
        compare_cells.load_cell(tmp_path / "cell.json", compare_cells.settings(cnn, masking))


def test_a_vit_random_init_row_starts_from_the_sin_cos_table_unless_its_arm_says(tmp_path):
    from pretexts.backbones.vit_tokens import sincos_pos_embed
    from pretexts.engine.compare.config import CompareConfig

    copy_sample_images(tmp_path / "data" / "train", 16)
    study = CompareConfig(backbone="vit_tiny", img_size=32, data=str(tmp_path / "data"), batch_size=8)
    for positions, table in (({}, True), ({"positions": "learned"}, False)):
        arm = compare_cells.Arm(compare_cells.RANDOM, None, positions)
        compare_cells.untrained(study, arm, 0, tmp_path / "cell")
        saved = load_checkpoint(tmp_path / "cell" / "m0" / "checkpoint.pt")["model"]["backbone.pos_embed"]
        assert torch.allclose(saved[0, 1:], sincos_pos_embed((8, 8), 192)) == table


def test_an_arms_override_wins_over_the_cells_own_values(tmp_path):
    """An arm may plan its schedule to end at its budget: its `epochs` replaces the cell's open-ended one."""
    from pretexts.engine.compare.config import CompareConfig

    study = CompareConfig(backbone="test_convnext")
    planned = compare_cells.Arm("cosine", "energy", {"task": "random-mask", "schedule": "cosine", "epochs": 9})
    open_ended = compare_cells.Arm("energy", "energy", {"task": "random-mask"})
    assert compare_cells.pretrain_config(study, planned, 0, tmp_path).epochs == 9
    assert compare_cells.pretrain_config(study, open_ended, 0, tmp_path).epochs == 100000
    # `--schedule auto` decays to a planned end: an open-ended run, cut at its budgets, keeps the lr constant
    assert compare_cells.pretrain_config(study, open_ended, 0, tmp_path).schedule == "constant"
    assert compare_cells.pretrain_config(study, planned, 0, tmp_path).schedule == "cosine"
    planned_auto = compare_cells.Arm("energy", "energy", {"task": "random-mask", "epochs": 9})
    assert compare_cells.pretrain_config(study, planned_auto, 0, tmp_path).schedule == "auto"
