"""The GPU path: every command of the CLI runs a few steps on CUDA, with bf16 autocast where the command has one.

Marked `cuda` and skipped without a GPU; `pytest -m cuda` runs them (about a minute on one GPU). Each test asserts
what a user relies on: exit code 0, the files written, finite numbers in the results, and, from inside the run,
that the parameters were on the device during a step and the loss ran under bf16 autocast.

`PRETEXTS_TEST_DEVICE=cpu pytest -m cuda tests/test_cuda.py` runs the same bodies on the CPU (bf16 autocast there
too) and lifts the skip: a dry run on a machine without a GPU, which is how this file was checked before it met one.
"""

import dataclasses
import json
import math
import os

import pytest
import torch
from cli_runs import one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (a fixture)
from pretext_images import cifar_batch, tiny_vit

from pretexts import create_pretext, list_pretexts
from pretexts.engine.evaluation import probe
from pretexts.engine.methods.energy.model import EnergyModel
from pretexts.engine.methods.states import state_adapter
from pretexts.engine.training.loop import Pretrainer
from pretexts.engine.training.optimizer_step import OptimizerStep

DEVICE = os.environ.get("PRETEXTS_TEST_DEVICE", "cuda")
KIND = torch.device(DEVICE).type  # what a tensor's device.type reads (cuda:1 -> cuda)
pytestmark = [
    pytest.mark.cuda,
    pytest.mark.skipif(
        KIND == "cuda" and not torch.cuda.is_available(),
        reason="needs a CUDA GPU (PRETEXTS_TEST_DEVICE=cpu dry-runs this file on the CPU)",
    ),
]

CONVNEXT = ["--backbone", "test_convnext"]
VIT = ["--backbone", "vit_tiny"]  # patch 4 at 32 px
FAST = ["--batch-size", "8", "--workers", "0", "--device", DEVICE]
TRAIN = ["train", *FAST, "--amp", "bf16", "--epochs", "1", "--max-steps-per-epoch", "2", "--quiet"]


class Spy:
    """Records, from inside a command, what its steps ran on: the devices of the parameters each optimiser step
    updates, the autocast each loss ran under (its dtype; None: none), the devices of each training sample's
    tensors (the corruption), of each energy evaluation's input and weights, and of the probed backbone."""

    def __init__(self, monkeypatch):
        self.params, self.autocast, self.samples, self.energy, self.features = set(), set(), set(), set(), set()
        self.entered = None  # the autocast contexts entered by the loss running now
        step, compute_loss, energy, extract, enter = (
            OptimizerStep.__call__,
            Pretrainer.compute_loss,
            EnergyModel.energy,
            probe.extract_features,
            torch.autocast.__enter__,
        )
        spy = self

        def optimizer_step(self, loss_of, micro_batches, number):
            spy.params |= devices(self.model.parameters())

            def watched(micro):
                spy.entered = []
                try:
                    return loss_of(micro)
                finally:  # the outermost autocast of the loss is the run's (finite differences nest a disabled one)
                    spy.autocast.add(spy.entered[0] if spy.entered else None)
                    spy.entered = None

            return step(self, watched, micro_batches, number)

        def watched_enter(self):
            if spy.entered is not None:
                spy.entered.append(self.fast_dtype if self._enabled else None)
            return enter(self)

        def watched_compute_loss(self, sample):
            spy.samples |= devices(tensors_of(sample))
            return compute_loss(self, sample)

        def watched_energy(self, x):
            spy.energy |= devices([x, *self.parameters()])
            return energy(self, x)

        def watched_extract(model, *args, **kwargs):
            spy.features |= devices(model.parameters())
            return extract(model, *args, **kwargs)

        monkeypatch.setattr(OptimizerStep, "__call__", optimizer_step)
        monkeypatch.setattr(torch.autocast, "__enter__", watched_enter)
        monkeypatch.setattr(Pretrainer, "compute_loss", watched_compute_loss)
        monkeypatch.setattr(EnergyModel, "energy", watched_energy)
        monkeypatch.setattr(probe, "extract_features", watched_extract)


def devices(tensors) -> set:
    return {t.device.type for t in tensors}


def tensors_of(sample) -> list:
    """The tensors (and generators) a training sample carries: a task's Corrupted or a method's own sample."""
    fields = [getattr(sample, f.name) for f in dataclasses.fields(sample)]
    return [f for f in fields if isinstance(f, (torch.Tensor, torch.Generator))]


def finite_numbers(record) -> list:
    """Every number in a results.json, nested; asserts each is finite."""
    if isinstance(record, dict):
        return [n for value in record.values() for n in finite_numbers(value)]
    if isinstance(record, list):
        return [n for value in record for n in finite_numbers(value)]
    if isinstance(record, (int, float)) and not isinstance(record, bool):
        assert math.isfinite(record), record
        return [record]
    return []


def succeeds(args) -> str:
    result, error = run_cli(args)
    assert result.exit_code == 0, error or result.output
    return result.output


def read_results(path) -> dict:
    record = json.loads(path.read_text())
    assert finite_numbers(record)
    return record


@pytest.fixture
def spy(monkeypatch):
    return Spy(monkeypatch)


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    return tiny_image_folder(tmp_path_factory.mktemp("cuda") / "data")


@pytest.fixture(scope="module")
def energy_run(tmp_path_factory, data):
    """An energy run (exact gradients) trained on the device, and what its steps ran on."""
    out = tmp_path_factory.mktemp("cuda") / "energy"
    with pytest.MonkeyPatch.context() as patch:
        seen = Spy(patch)
        succeeds([*TRAIN, *CONVNEXT, "--data", data, "--out", out])
    return out, seen


def assert_trained_on_device(out, seen: Spy, energy: bool):
    assert {"checkpoint.pt", "log.jsonl", "results.json", "config.json"} <= {p.name for p in out.iterdir()}
    read_results(out / "results.json")
    losses = [json.loads(line)["loss"] for line in (out / "log.jsonl").read_text().splitlines()]
    assert len(losses) == 2 and all(math.isfinite(x) for x in losses)
    assert seen.params == {KIND} and seen.samples == {KIND}  # the corruption ran on the device too
    assert seen.autocast == {torch.bfloat16}
    assert seen.energy == ({KIND} if energy else set())


def test_train_energy_exact(energy_run):
    assert_trained_on_device(*energy_run, energy=True)


@pytest.mark.parametrize(
    "method",
    [
        ["--grad-mode", "finite-difference", *CONVNEXT],
        ["--method", "ae", *CONVNEXT],
        ["--method", "mae", *VIT],
        ["--method", "simmim", *CONVNEXT],
    ],
    ids=["energy-finite-difference", "ae", "mae", "simmim"],
)
def test_train_every_method(tmp_path, data, spy, method):
    succeeds([*TRAIN, *method, "--data", data, "--out", tmp_path / "run"])
    assert_trained_on_device(tmp_path / "run", spy, energy="--method" not in method)


def test_finetune(tmp_path, energy_run, spy):
    out = tmp_path / "ft"
    succeeds(
        [
            "finetune",
            "--checkpoint",
            energy_run[0] / "checkpoint.pt",
            *FAST,
            "--amp",
            "bf16",
            "--epochs",
            "1",
            "--max-steps-per-epoch",
            "2",
            "--randaug",
            "none",
            "--quiet",
            "--out",
            out,
        ]
    )
    results = read_results(out / "results.json")
    assert 0 <= results["best_top1"] <= 100 and (out / "finetuned.pt").is_file()
    assert spy.params == {KIND} and spy.autocast == {torch.bfloat16}


def test_probe(tmp_path, energy_run, spy):
    out = tmp_path / "probe"
    succeeds(
        [
            "probe",
            "--checkpoint",
            energy_run[0] / "checkpoint.pt",
            "--probe",
            "knn",
            "--probe",
            "linear",
            "--epochs",
            "2",
            "--workers",
            "0",
            "--device",
            DEVICE,
            "--quiet",
            "--out",
            out,
        ]
    )
    results = read_results(out / "results.json")
    assert {"knn", "linear"} <= set(results) and results["train_images"] == 32
    assert spy.features == {KIND}


def test_segment(tmp_path, energy_run, spy):
    out = tmp_path / "seg"
    succeeds(
        [
            "segment",
            "--checkpoint",
            energy_run[0] / "checkpoint.pt",
            "--data",
            "generated",
            *FAST,
            "--amp",
            "bf16",
            "--max-steps",
            "2",
            "--quiet",
            "--out",
            out,
        ]
    )
    results = read_results(out / "results.json")
    assert 0 <= results["miou_percent"] <= 100 and results["steps"] == 2
    assert (out / "predictions.png").stat().st_size > 0
    assert spy.params == {KIND} and spy.autocast == {torch.bfloat16}


def test_restore(tmp_path, energy_run, spy):
    fig = tmp_path / "restored.png"
    succeeds(
        [
            "restore",
            "--checkpoint",
            energy_run[0] / "checkpoint.pt",
            "--images",
            "2",
            "--steps",
            "1",
            "--device",
            DEVICE,
            "--out",
            fig,
        ]
    )
    numbers = read_results(fig.with_suffix(".json"))
    assert numbers["images"] == 2 and len(numbers["restored_mse"]) == 1 and fig.stat().st_size > 0
    assert spy.energy == {KIND}


def test_energy_histogram(tmp_path, energy_run, spy):
    fig = tmp_path / "energy.png"
    succeeds(
        [
            "energy",
            "--checkpoint",
            energy_run[0] / "checkpoint.pt",
            "--images",
            "8",
            "--workers",
            "0",
            "--device",
            DEVICE,
            "--out",
            fig,
        ]
    )
    read_results(fig.with_suffix(".json"))
    assert fig.stat().st_size > 0 and spy.energy == {KIND}


def test_export(tmp_path, energy_run):
    """A checkpoint written on the device exports (its tensors are mapped to the CPU on load)."""
    out = tmp_path / "export"
    succeeds(["export", "--checkpoint", energy_run[0] / "checkpoint.pt", "--out", out])
    assert (out / "model.safetensors").stat().st_size > 0 and json.loads((out / "config.json").read_text())


def test_compare(tmp_path, data, spy):
    """A tiny comparison: its pretraining takes the device and, with amp left at auto, bf16 on CUDA."""
    out = tmp_path / "compare"
    succeeds(
        [
            "compare",
            *CONVNEXT,
            "--batch-size",
            "8",
            "--budget",
            "0.01",
            "--threads",
            "1",
            "--device",
            DEVICE,
            "--data",
            data,
            "--tasks",
            "colorization",
            "--methods",
            "energy",
            "--seeds",
            "0",
            "--quiet",
            "--out",
            out,
        ]
    )
    record = read_results(out / "compare.json")
    assert len(record["cells"]) == 2 and (out / "compare.md").is_file()
    assert spy.params == {KIND} and spy.samples == {KIND}
    assert spy.autocast == {torch.bfloat16 if KIND == "cuda" else None}


@pytest.mark.parametrize("name", list_pretexts())
def test_every_task_draws_and_applies_on_the_device(name):
    """Every tensor a corruption draws and returns stays on the device (tests/test_tasks.py checks the state)."""
    images = cifar_batch(4).to(DEVICE)
    task = state_adapter(create_pretext(name), tiny_vit()).prepare()
    generator = torch.Generator(DEVICE).manual_seed(0)
    params = task.draw(images, generator)
    sample = task.apply(images, params)
    drawn = [v for v in params.values() if isinstance(v, torch.Tensor)]
    returned = [t for t in (sample.state, sample.target, sample.context) if t is not None]
    assert devices(drawn + returned) == {KIND}


def test_finite_differences_keep_their_accuracy_under_tf32():
    """TF32 is on by default on CUDA; the finite-difference estimate of the restoration's gradient still points
    where the exact double backward's does (tests/test_grad_modes.py's bar, in float32 on the CPU)."""
    from pretexts.engine.methods.energy.restore import restoration_loss, restore
    from pretexts.engine.training.arithmetic import use_cuda_arithmetic

    saved = torch.get_float32_matmul_precision(), torch.backends.cudnn.allow_tf32
    use_cuda_arithmetic(torch.device(DEVICE), tf32=True, cudnn_benchmark=True)
    try:
        model = tiny_vit().to(DEVICE)
        task = create_pretext("denoising")
        sample = task(cifar_batch(8).to(DEVICE), torch.Generator(DEVICE).manual_seed(0))
        grads = []
        for mode in ("exact", "finite-difference"):
            model.zero_grad(set_to_none=True)
            restoration_loss(restore(model, task, sample, steps=2, grad_mode=mode), sample.target).backward()
            named = [(n, p) for n, p in model.named_parameters() if n != "log_alpha"]
            grads.append(torch.cat([(torch.zeros_like(p) if p.grad is None else p.grad).flatten() for _, p in named]))
    finally:
        torch.set_float32_matmul_precision(saved[0])
        torch.backends.cudnn.allow_tf32 = saved[1]
    assert grads[0].norm() > 0
    assert torch.nn.functional.cosine_similarity(*grads, dim=0) >= 0.99
