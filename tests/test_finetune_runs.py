"""A fine-tune's run folder: a stopped run resumes to the same weights, a pretraining checkpoint is not resumed,
best.pt keeps the best epoch beside the final weights."""

import json

import pytest
import torch
from click.testing import CliRunner
from pretrained_checkpoints import SMALL_DATA, finetune_argv, single_thread, write_checkpoint  # noqa: F401 (a fixture)
from stop_runs import sigterm_at_step

from pretexts.cli import main
from pretexts.engine import FinetuneConfig, Finetuner
from pretexts.errors import CheckpointError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


def test_a_stopped_fine_tune_resumes_to_the_same_weights(tmp_path):
    """SIGTERM in epoch 2 keeps epoch 1's checkpoint; --resume then equals an uninterrupted run, with
    mixup, RandAugment and drop path drawing from the restored random states."""
    recipe = {
        **SMALL_DATA,
        "mixup": 0.8,
        "cutmix": 1.0,
        "randaug": "rand-m9-mstd0.5-inc1-mmax9",
        "drop_path": 0.1,
        "max_steps_per_epoch": 3,
        "epochs": 2,
    }

    def config(out, **extra):
        return FinetuneConfig(from_scratch=True, backbone="test_convnext", out=str(out), **{**recipe, **extra})

    straight = Finetuner(config(tmp_path / "straight"), echo=lambda line: None)
    straight.run()

    stopped = Finetuner(config(tmp_path / "stopped"), echo=lambda line: None)
    sigterm_at_step(stopped, 4)  # the second step of epoch 2
    results = stopped.run()
    assert results["interrupted"] == "SIGTERM" and results["exit_code"] == 143 and results["epochs"] == 1
    assert torch.load(tmp_path / "stopped" / "checkpoint.pt", weights_only=False)["epoch"] == 1

    lines = []
    resumed = Finetuner(config(tmp_path / "stopped", resume="auto"), echo=lines.append)
    assert resumed.run()["epochs"] == 2
    for (name, a), b in zip(straight.model.state_dict().items(), resumed.model.state_dict().values()):
        torch.testing.assert_close(a, b, msg=name)
    log = [json.loads(line)["epoch"] for line in (tmp_path / "stopped" / "log.jsonl").read_text().splitlines()]
    assert log == [1, 2]
    assert not [line for line in lines if "other arithmetic" in line]  # same threads: an exact resume, said nothing

    # continued with another thread count: it goes on, and says it will not repeat bit for bit
    threads = torch.get_num_threads()
    torch.set_num_threads(threads + 1)
    try:
        lines.clear()
        Finetuner(config(tmp_path / "stopped", resume="auto", epochs=3), echo=lines.append).run()
    finally:
        torch.set_num_threads(threads)
    assert [line for line in lines if f"threads {threads} -> {threads + 1}" in line and "bit for bit" in line]
    saved = json.loads((tmp_path / "stopped" / "results.json").read_text())["arithmetic"]
    assert saved["threads"] == threads + 1 and saved["cpu_capability"] == torch.backends.cpu.get_cpu_capability()


def test_resume_refuses_a_pretraining_checkpoint(tmp_path):
    path, _ = write_checkpoint(tmp_path / "ckpt.pt")
    cfg = FinetuneConfig(checkpoint=str(path), resume=str(path), out=str(tmp_path / "ft"), **SMALL_DATA)
    with pytest.raises(CheckpointError, match="is a pretraining checkpoint"):
        Finetuner(cfg, echo=lambda line: None).run()


def test_best_pt_keeps_the_best_epochs_weights_beside_the_final_ones(tmp_path, monkeypatch):
    """Val top-1 scripted 50, 70, 60: best.pt holds epoch 2's weights, finetuned.pt epoch 3's, and the last line
    and results.json say both."""
    import copy

    from pretexts.engine.evaluation import finetune as module

    scripted, states = iter([50.0, 70.0, 60.0]), []

    def top1(model, *args):
        states.append(copy.deepcopy(model.state_dict()))
        return next(scripted)

    monkeypatch.setattr(module, "top1_accuracy", top1)
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext")
    out = tmp_path / "ft"
    result = CliRunner().invoke(main, finetune_argv(ckpt, out, "--warmup-epochs", "0", epochs=3))
    assert result.exit_code == 0, result.output
    results = json.loads((out / "results.json").read_text())
    assert (results["best_epoch"], results["best_top1"], results["final_top1"]) == (2, 70.0, 60.0)
    assert results["weights"] == {"final": "finetuned.pt", "best": "best.pt"}
    assert (
        f"top-1 on val/ (80 images, 10 classes): final 60.00% (epoch 3, {out}/finetuned.pt), best 70.00% "
        f"(epoch 2, {out}/best.pt)"
    ) in result.output
    for name, epoch in (("best.pt", 2), ("finetuned.pt", 3)):
        saved = torch.load(out / name, weights_only=True)
        assert saved["kind"] == "finetuned" and saved["epoch"] == epoch
        for key, value in states[epoch - 1].items():
            torch.testing.assert_close(saved["model"][key], value, msg=f"{name} {key}")
    assert not all(torch.equal(states[1][k], states[2][k]) for k in states[1])  # the epochs differ


def test_a_folder_holding_only_a_best_pt_is_a_run(tmp_path):
    """best.pt is a run's file: never silently replaced, and --force removes it with the rest."""
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext")
    out = tmp_path / "ft"
    out.mkdir()
    (out / "best.pt").write_bytes(b"an earlier run's best weights")
    args = finetune_argv(ckpt, out)
    result = CliRunner().invoke(main, args)
    assert result.exit_code == 2 and "already holds a run (best.pt)" in result.output
    assert (out / "best.pt").read_bytes() == b"an earlier run's best weights"
    assert CliRunner().invoke(main, [*args, "--force"]).exit_code == 0
    assert torch.load(out / "best.pt", weights_only=True)["epoch"] == 1
