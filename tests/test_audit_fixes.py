"""Fixes from the code and docs audits: `energy` takes `--preset` as `restore` does, from one declaration; a checkpoint
without a field this format records is refused in one line; `--loss auto` reads the task's `masking` declaration
(a mixture of masks alone is masking); the collapse advice points at the fill study's page; log.jsonl holds each
step's gradient norm; a resume's compile line says the choice is the resumed run's."""

import json
import shutil
from pathlib import Path

import pytest
from cli_runs import ONE_STEP, fails_cleanly, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (a fixture)
from pretrained_checkpoints import write_checkpoint

import pretexts
from pretexts.cli import main
from pretexts.engine import energy_histogram, load_checkpoint
from pretexts.engine.evaluation.from_checkpoint import load_energy_run
from pretexts.engine.methods.energy import EnergyMethod
from pretexts.engine.methods.energy.method import resolve_auto
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.engine.training.compile_choice import choose_compile
from pretexts.errors import CheckpointError
from pretexts.tasks.masking import MaskingTask, fill_param

# ---- `energy` and `restore` take the task alike ---------------------------------------------------------------------
OPTIONS = {"restore": ["--images", "2"], "energy": ["--images", "2", "--workers", "0"]}


@pytest.fixture(scope="module")
def black_masks(tmp_path_factory):
    path, _ = write_checkpoint(
        tmp_path_factory.mktemp("masks") / "ckpt.pt", task="random-mask", task_args={"fill": "black"}
    )
    return path


def recorded_task_args(command: str, checkpoint, out, *args) -> dict:
    result, error = run_cli([command, "--checkpoint", checkpoint, *OPTIONS[command], *args, "--out", out])
    assert result.exit_code == 0, result.output + error
    return json.loads(out.with_suffix(".json").read_text())["task_args"]


@pytest.mark.parametrize("command", ["restore", "energy"])
def test_a_preset_changes_the_corruption_of_energy_as_of_restore(command, black_masks, tmp_path):
    trained = recorded_task_args(command, black_masks, tmp_path / "trained.png")
    small = recorded_task_args(command, black_masks, tmp_path / "small.png", "--preset", "small")
    assert trained["count"] != 75 and small["count"] == 75 and small["fill"] == "black"  # the trained fill is kept
    named = recorded_task_args(
        command, black_masks, tmp_path / "named.png", "--task", "random-mask", "--preset", "large"
    )
    assert named["count"] == 25 and named["fill"] == "gray"  # a named task starts from its own defaults


def test_energy_histogram_takes_a_preset_in_python(black_masks, tmp_path):
    results = energy_histogram(str(black_masks), str(tmp_path / "e.png"), preset="small", images=2, workers=0)
    assert results["task_args"]["count"] == 75 and results["task_args"]["fill"] == "black"


def test_the_two_commands_declare_their_shared_options_once():
    def declared(command):
        return {p.name: (p.opts, p.type.name, p.default, p.help) for p in main.commands[command].params}

    energy, restore = declared("energy"), declared("restore")
    shared = {"checkpoint", "task", "task_args", "preset", "data", "steps", "seed", "device", "out", "force"}
    assert shared <= energy.keys() & restore.keys()
    assert {name: energy[name] for name in shared if name != "data"} == {
        name: restore[name] for name in shared if name != "data"
    }


# ---- a checkpoint lacking a recorded field ---------------------------------------------------------------------------
@pytest.fixture(scope="module")
def one_step_run(tmp_path_factory):
    """A one-step run on a tiny image folder, and the output of `train`."""
    root = tmp_path_factory.mktemp("run")
    data, out = tiny_image_folder(root / "data"), root / "run"
    result, error = run_cli([*ONE_STEP, "--data", data, "--out", out, "--monitor-every", "0"])
    assert result.exit_code == 0, result.output + error
    return data, out


@pytest.mark.parametrize("field", ["data_images", "task_sizes"])
def test_a_resume_from_a_checkpoint_lacking_a_recorded_field_is_refused(field, one_step_run, tmp_path):
    data, run = one_step_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    ckpt = load_checkpoint(out / "checkpoint.pt")
    save_checkpoint({k: v for k, v in ckpt.items() if k != field}, out / "checkpoint.pt")
    fails_cleanly(
        ["train", "--out", out, "--resume", "--epochs", "2"], "does not record", f"({field})", "start a new run"
    )


def test_a_checkpoint_that_does_not_record_its_resolved_loss_is_refused(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt", task="random-mask")  # its config says loss auto
    with pytest.raises(CheckpointError, match=r"does not record the loss.*--loss auto.*start a new run"):
        load_energy_run(path)


# ---- `--loss auto` reads the task's declaration ---------------------------------------------------------------------
class Boxes(pretexts.Pretext):
    """A plugin that masks without subclassing MaskingTask: it declares it."""

    name = "test-boxes"
    masking = True

    def corrupt(self, images, generator=None):
        return pretexts.Corrupted(state=images, target=images)


class Squares(MaskingTask):
    """A plugin that subclasses MaskingTask (its `fill` comes with it)."""

    name = "test-squares"
    params = {"fill": fill_param()}

    def corrupt(self, images, generator=None):
        return pretexts.Corrupted(state=images, target=images)


@pytest.mark.parametrize(
    ("task", "backbone", "loss"),
    [
        (pretexts.create_pretext("random-mask"), "test_vit", "patch-centred"),
        (pretexts.create_pretext("mixed", tasks="random-mask,gridded-mask"), "test_vit", "patch-centred"),
        (pretexts.create_pretext("mixed", tasks="random-mask,colorization"), "test_vit", "mse"),
        (pretexts.create_pretext("mixed"), "test_vit", "mse"),
        (pretexts.create_pretext("colorization"), "test_vit", "mse"),
        (Boxes(), "test_vit", "patch-centred"),
        (Squares(), "test_vit", "patch-centred"),
        (pretexts.create_pretext("mixed", tasks="random-mask,gridded-mask"), "test_convnext", "mse"),
    ],
)
def test_loss_auto_follows_the_masking_declaration(task, backbone, loss):
    assert resolve_auto(backbone, 32, task)["loss"] == loss


def test_a_mixture_of_masks_trains_a_vit_with_the_patch_centred_loss(tmp_path):
    result, error = run_cli(
        [
            *("train", "--backbone", "test_vit", "--batch-size", "4", "--epochs", "1", "--max-steps-per-epoch", "1"),
            *("--workers", "0", "--monitor-every", "0", "--eval-images", "4", "--task", "mixed"),
            *("--task-arg", "tasks=random-mask,gridded-mask", "--out", tmp_path / "run"),
        ]
    )
    assert result.exit_code == 0, result.output + error
    assert "loss patch-centred" in result.output
    assert json.loads((tmp_path / "run" / "config.json").read_text())["method_args"]["loss"] == "patch-centred"


# ---- the collapse advice, the logged gradient norm, the compile line -------------------------------------------------
def test_the_collapse_advice_points_at_the_page_that_holds_the_fill_study():
    root = Path(__file__).resolve().parents[1]
    for advice in EnergyMethod.shortcut_advice.values():
        assert "docs/results/mask-fills.md" in advice and "representation.md" not in advice
    assert "## Why take one drifted" in (root / "docs" / "results" / "mask-fills.md").read_text()


def test_log_jsonl_holds_each_steps_gradient_norm(one_step_run):
    _, run = one_step_run
    lines = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert lines and all(line["grad_norm"] > 0 for line in lines)


def test_a_resume_says_its_compile_is_the_resumed_runs(one_step_run, tmp_path):
    data, run = one_step_run
    out = tmp_path / "run"
    shutil.copytree(run, out)
    result, error = run_cli(["train", "--out", out, "--resume", "--epochs", "2"])
    assert result.exit_code == 0, result.output + error
    assert "compile: off (--compile; as the resumed run has it)" in result.output
    assert "(--compile off)" not in result.output


def test_the_compile_line_counts_one_step_in_the_singular():
    run = {"measured_gain": 0.85, "device_type": "cpu", "autocast": False, "batch_size": 8, "img_size": 32}
    assert "auto: 1 step would not repay" in choose_compile("auto", planned_steps=1, **run).why
    assert "auto: 2 steps would not repay" in choose_compile("auto", planned_steps=2, **run).why
    kept = choose_compile(None, planned_steps=1, resumed=True, **run)
    assert kept.describe() == "compile: off (--compile; as the resumed run has it)"
