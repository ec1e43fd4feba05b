"""The energy method's Python API corrupts, restores and scores as `pretexts train` does: the task is prepared for
the model before it corrupts (`prepare_task`), `create_energy_model`'s defaults build the run's model, a trained run
loads back with its task and loss (`load_energy_run`), and what a user can get wrong is a ParameterError."""

import doctest
import inspect
import json

import pytest
import torch
from cli_runs import ONE_STEP, one_torch_thread, run_cli, tiny_image_folder  # noqa: F401 (a fixture)
from pretext_images import cifar_batch

import pretexts
from pretexts import ParameterError, create_pretext
from pretexts.engine import (
    EnergyMethod,
    PretrainConfig,
    Pretrainer,
    create_energy_model,
    figure_columns,
    load_energy_run,
    prepare_task,
    restoration_error,
    restoration_loss,
    restore,
)
from pretexts.engine.data.datasets import build_source
from pretexts.engine.data.loader import AugmentedImages, held_out_batches, unaugmented_transform
from pretexts.engine.evaluation import from_checkpoint
from pretexts.engine.methods.energy.method import energy_model_for
from pretexts.engine.methods.states import prepare_task as prepare_task_where_defined

# a LayerNorm ConvNeXt normalised with mean 0.5: a gray box left on the mean sends its loss at init to ~1e7
ZEPTO = "convnext_zepto_rms"


def gen(seed: int = 0) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def trainers_method(backbone: str, task: str, build_model=None, **method_args) -> EnergyMethod:
    """The energy method as `pretexts train` sets it up (built, resolved, its task prepared), at 32 px."""

    class Built(EnergyMethod):
        def build_model(self):
            return build_model(self.args) if build_model else super().build_model()

    torch.manual_seed(0)
    cfg = PretrainConfig(backbone=backbone, img_size=32, task=task, method_args=method_args)
    method = Built(cfg, create_pretext(task), torch.device("cpu"))
    method.setup()
    return method


def test_the_documented_path_corrupts_and_scores_as_a_training_step():
    """Real images, a gray gridded mask on a mean-0.5 LayerNorm CNN: the trainer's corrupted batch and loss."""
    images = cifar_batch(8)
    method = trainers_method(ZEPTO, "gridded-mask")
    expected_sample = method.task(images, gen())
    expected = method.loss(expected_sample)

    model = create_energy_model(ZEPTO, img_size=32)
    model.load_state_dict(method.model.state_dict())
    task = prepare_task(create_pretext("gridded-mask"), model)
    sample = task(images, gen())
    assert torch.equal(sample.state, expected_sample.state)
    loss = restoration_loss(restore(model, task, sample), sample.target)
    torch.testing.assert_close(loss, expected)
    assert loss < 1  # not the ~1e7 of boxes on the normalisation mean


def test_a_sample_corrupted_for_another_model_is_refused():
    model = create_energy_model(ZEPTO, img_size=32)
    task = create_pretext("gridded-mask")  # gray boxes kept off ImageNet's mean, not the model's 0.5
    sample = task(cifar_batch(2), gen())
    for call in (
        lambda: restore(model, task, sample),
        lambda: pretexts.engine.methods.energy.restore.contrastive_loss(model, task, sample),
    ):
        with pytest.raises(ParameterError, match=r"corrupted for another model.*task = prepare_task\(task, model\)"):
            call()
    black = create_pretext("gridded-mask", fill="black")  # reads no mean: the same corruption for every model
    assert len(restore(model, black, black(cifar_batch(2), gen()), steps=1)) == 1


def test_prepare_task_is_idempotent_and_public():
    model = create_energy_model(ZEPTO, img_size=32)
    task = create_pretext("gridded-mask")
    assert prepare_task(task, model) is task and prepare_task(task, model) is task
    assert task.norm_mean == (0.5, 0.5, 0.5)
    assert pretexts.prepare_task is prepare_task_where_defined  # reached from `import pretexts` too


def test_restoration_error_and_figure_columns_prepare_the_task_they_corrupt_with():
    images = cifar_batch(4)
    model = create_energy_model(ZEPTO, img_size=32).eval()
    prepared = prepare_task(create_pretext("gridded-mask"), model)
    expected = restoration_error(model, prepared, [images], 1, "cpu")
    got = restoration_error(model, create_pretext("gridded-mask"), [images], 1, "cpu")
    assert got.to_dict() == expected.to_dict()
    columns = figure_columns(model, create_pretext("gridded-mask"), images, 1)
    expected_columns = figure_columns(model, prepared, images, 1)
    assert all(torch.equal(columns[name], expected_columns[name]) for name in expected_columns)


def test_the_reported_restored_error_is_the_restored_images_own_mse():
    """`restored_mse` (the terminal's, results.json's and the figure's number) is the error of each restored step,
    measured on the same seeded corruption under eval mode; not the corrupted input's."""
    images = cifar_batch(4)
    torch.manual_seed(0)
    model = create_energy_model("test_convnext", img_size=32, alpha=1.0).train()
    report = restoration_error(model, create_pretext("colorization"), [images], 2, "cpu", seed=3)
    assert model.training, "the model's own mode comes back"

    task = prepare_task(create_pretext("colorization"), model)
    sample = task(images, gen(3))
    with torch.no_grad():
        states = restore(model.eval(), task, sample, steps=2)
    by_hand = [torch.nn.functional.mse_loss(state, sample.target).item() for state in states]
    corrupted = torch.nn.functional.mse_loss(sample.state, sample.target).item()
    assert report.corrupted_mse == pytest.approx(corrupted)
    assert report.restored_mse == pytest.approx(by_hand, rel=1e-5)
    assert all(abs(step - corrupted) > 0.1 * corrupted for step in report.restored_mse), (by_hand, corrupted)


def test_patch_sorting_restores_through_the_public_api_as_the_trainer_does():
    images = cifar_batch(4)

    def small_vit(args):
        return create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2, positions=args["positions"])

    method = trainers_method("vit_tiny", "patch-sorting", small_vit)
    expected_sample = method.task(images, gen())
    expected = method.loss(expected_sample)

    model = create_energy_model("vit_tiny", img_size=32, patch_size=8, depth=2).train()
    model.load_state_dict(method.model.state_dict())
    task = prepare_task(create_pretext("patch-sorting"), model)
    sample = task(images, gen())
    assert torch.equal(sample.state, expected_sample.state)
    loss = restoration_loss(restore(model, task, sample), sample.target)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert model.backbone.blocks[0].attn.qkv.weight.grad.abs().sum() > 0


@pytest.mark.parametrize("backbone", ["vit_tiny", "test_convnext"])
def test_the_python_defaults_build_the_model_pretexts_train_builds(backbone):
    cfg = PretrainConfig(backbone=backbone, img_size=32)
    torch.manual_seed(0)
    trained = energy_model_for(cfg, EnergyMethod.parse_args(cfg))
    torch.manual_seed(0)
    by_hand = create_energy_model(backbone, img_size=32)
    assert by_hand.positions == trained.positions == ("sincos" if backbone == "vit_tiny" else "learned")
    for (name, mine), (_, theirs) in zip(by_hand.named_parameters(), trained.named_parameters(), strict=True):
        assert torch.equal(mine, theirs) and mine.requires_grad == theirs.requires_grad, name


def tiny_run(tmp_path):
    """A one-step `pretexts train` of a test ViT (mean 0.5, so gray boxes are moved off it; loss auto:
    patch-centred; positions auto: sincos) on a tiny ImageFolder; its Pretrainer after the run."""
    cfg = PretrainConfig(
        backbone="test_vit",
        img_size=32,
        task="gridded-mask",
        data=str(tiny_image_folder(tmp_path / "data")),
        epochs=1,
        max_steps_per_epoch=1,
        batch_size=4,
        eval_images=2,
        monitor_every=0,
        workers=0,
        quiet=True,
        compile="off",
        out=str(tmp_path / "run"),
    )
    trainer = Pretrainer(cfg)
    trainer.run()
    return trainer


def test_a_loaded_run_restores_and_scores_as_its_trainer_and_pretexts_restore(tmp_path):
    trainer = tiny_run(tmp_path)
    checkpoint = tmp_path / "run" / "checkpoint.pt"
    run = load_energy_run(checkpoint)
    assert (run.task.name, run.steps, run.loss, run.loss_patch, run.model.positions) == (
        "gridded-mask",
        2,
        "patch-centred",
        trainer.model.backbone.patch_embed.patch_size[0],
        "sincos",
    )
    assert run.task.norm_mean == (0.5, 0.5, 0.5) and not run.model.training

    images = cifar_batch(4)
    trainer.model.train(), run.model.train()
    expected_sample = trainer.task(images, gen())
    expected = trainer.method.loss(expected_sample)
    sample = run.task(images, gen())
    assert torch.equal(sample.state, expected_sample.state)
    torch.testing.assert_close(run.restoration_loss(run.restore(sample), sample.target), expected)

    figure = tmp_path / "restored.png"
    result, error = run_cli(["restore", "--checkpoint", checkpoint, "--images", 2, "--out", figure])
    assert result.exit_code == 0, result.output
    cfg = run.config
    source = build_source(cfg.data, "val", cfg.img_size, 0)
    shown = torch.cat(list(held_out_batches(AugmentedImages(source, unaugmented_transform(32), 0), 2, 0, "cpu", 0)))
    held = restoration_error(run.model.eval(), run.task, [shown], run.steps, "cpu", seed=0)
    cli = json.loads(figure.with_suffix(".json").read_text())
    assert cli["restored_mse"] == pytest.approx(held.restored_mse)


def test_a_checkpoint_of_another_method_is_refused(tmp_path):
    result, error = run_cli(
        [*ONE_STEP, "--method", "ae", "--data", tiny_image_folder(tmp_path / "d"), "--out", tmp_path / "ae"]
    )
    assert result.exit_code == 0, result.output
    with pytest.raises(pretexts.CheckpointError, match="--method ae"):
        load_energy_run(tmp_path / "ae" / "checkpoint.pt")


def test_what_a_user_can_get_wrong_is_a_parameter_error_naming_the_range():
    sample = create_pretext("denoising")(cifar_batch(2), gen())
    with pytest.raises(ParameterError, match=r"at least one restored state.*steps >= 1.*contrastive_loss"):
        restoration_loss([], sample.target)
    with pytest.raises(ParameterError, match="loss kind must be"):
        restoration_loss([sample.state], sample.target, kind="l1")
    for alpha in (float("nan"), float("inf"), 0, -0.1, None):
        with pytest.raises(ParameterError, match=r"alpha must be a finite number > 0"):
            create_energy_model("test_convnext", img_size=32, alpha=alpha)
    with pytest.raises(ParameterError, match=r"energy_scale must be a finite number > 0"):
        create_energy_model("test_convnext", img_size=32, energy_scale=float("nan"))
    model = create_energy_model("test_convnext", img_size=32)
    task = create_pretext("denoising")
    with pytest.raises(ParameterError, match=r"iterable of image batches.*\[images\]"):
        restoration_error(model, task, cifar_batch(2), 1, "cpu")
    with pytest.raises(ParameterError, match="got no images"):
        restoration_error(model, task, [], 1, "cpu")
    with pytest.raises(ParameterError, match="grad mode must be one of exact, finite-difference"):
        restore(model.train(), task, sample, 1, grad_mode="newton")


def test_the_energy_method_says_what_it_learns():
    doc = EnergyMethod.__dict__.get("__doc__") or ""
    assert "energy" in doc and "steps" in doc and "positions" in doc


@pytest.mark.parametrize("obj", [prepare_task, from_checkpoint.load_energy_run, create_energy_model, restore])
def test_the_docstring_example_runs(obj):
    module = inspect.getmodule(obj)
    tests = doctest.DocTestFinder().find(obj, obj.__name__, module=module, globs={})
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    report = []
    for test in tests:
        runner.run(test, out=report.append)
    assert runner.tries > 0 and runner.failures == 0, "".join(report)
