"""Bad input through the CLI (settings, data, usage): one line saying what was wrong and what to do, exit code 2,
no traceback. Bad checkpoints and the other commands' bad input: test_bad_input_commands.py."""

import json

import numpy as np
import pytest
import torch
from cli_runs import TRAIN, copy_sample_images, fails_cleanly, one_torch_thread, run_cli  # noqa: F401 (autouse)
from PIL import Image

from pretexts.cli import main
from pretexts.engine.data.datasets import SAMPLE_DIR
from pretexts.engine.training.checkpoint import load_checkpoint
from pretexts.errors import ParameterError, PretextsError

FAST = TRAIN + ["--epochs", "1", "--max-steps-per-epoch", "1", "--workers", "0"]  # one step


@pytest.mark.parametrize(
    "args, expected",
    [
        (["--task", "colorisation"], ["unknown pretext task 'colorisation'", "Did you mean: colorization"]),
        (["--backbone", "resnet181"], ["unknown backbone 'resnet181'", "Did you mean:", "resnet18"]),
        (["--recipe", "papr"], ["unknown recipe 'papr'", "recipes: paper, fast", "Did you mean: paper?"]),
        (["--task", "super-resolution", "--task-arg", "scale=0"], ["'scale' is 0", "allowed range is [1, 1024]"]),
        (["--task", "super-resolution", "--task-arg", "scale=abc"], ["'scale' must be int, got 'abc'"]),
        (
            ["--task", "denoising", "--task-arg", "ratio=0.5"],
            ["unknown parameter 'ratio'", "valid parameters: gamma_low, gamma_high"],
        ),
        (["--task", "random-mask", "--preset", "huge"], ["unknown preset 'huge'", "presets: small, large"]),
        (
            ["--task", "gridded-mask", "--task-arg", "grid=64"],
            ["grid 64 is larger than the image (32 px)", "grid <= 8"],
        ),
        (
            ["--task", "mixed", "--task-arg", "tasks=random-mask,super-resolution:scale=16"],
            ["mixed: sub-task super-resolution: scale 16 leaves 2x2 low-resolution pixels at 32 px; use scale <= 8"],
        ),
        (["--task", "patch-sorting"], ["needs a ViT backbone", "test_convnext"]),
        (["--backbone", "vit_tiny", "--img-size", "30"], ["not divisible by the patch size 4", "e.g. 28"]),
        (["--img-size", "16"], ["backbone 'test_convnext' cannot run at image size 16", "use a larger --img-size"]),
        (["--steps", "-1"], ["parameter 'steps' is -1; allowed range is [0, 64]"]),
        (["--steps", "3", "--method-arg", "steps=1"], ["--steps 3 and --method-arg steps=1 set the same option"]),
        (["--resume", "--force"], ["--resume continues the run in --out and --force starts it over"]),
        (["--set", "betas=0.9"], ["--betas (betas) must be tuple or None, got 0.9 (write a list: betas=[a, b])"]),
        (
            ["--set", "task_args=foo"],
            ["--task-arg (task_args) must be dict, got 'foo' (write a mapping: task_args={key: value})"],
        ),
        (["--lr", "0"], ["--lr (lr) must be in (0, 1], got 0.0"]),
        (["--lr", "-1e-3"], ["--lr (lr) must be in (0, 1], got -0.001"]),
        # out of range or not finite: trained to NaN or exploded weights, exit 0 (issue 19)
        (["--lr", "inf"], ["--lr (lr) must be a finite number, got inf"]),
        (["--lr", "nan"], ["--lr (lr) must be a finite number, got nan"]),
        (["--warmup-epochs", "0", "--lr", "1e4"], ["--lr (lr) must be in (0, 1], got 10000.0"]),
        (["--base-lr", "2"], ["--base-lr (base_lr) must be in (0, 1], got 2.0"]),
        (["--lr", "1e-3", "--min-lr", "0.01"], ["--min-lr (min_lr) must be <= the peak lr 0.001", "lower --min-lr"]),
        (["--weight-decay", "inf"], ["--weight-decay (weight_decay) must be a finite number, got inf"]),
        (["--warmup-epochs", "inf"], ["--warmup-epochs (warmup_epochs) must be a finite number, got inf"]),
        (["--alpha", "inf"], ["parameter 'alpha' is inf; allowed range is [1e-06, 100.0]"]),
        (["--energy-scale", "-inf"], ["parameter 'energy_scale' is -inf; allowed range is [1e-06, 3e+38]"]),
        (["--betas", "2", "0.5"], ["--betas (betas) must be in [0, 1), got 2.0"]),
        (
            ["--set", "betas=[0.9, 0.95, 0.99]"],
            ["--betas (betas) must be two numbers in [0, 1)", "got [0.9, 0.95, 0.99]"],
        ),
        (
            ["--seed", "99999999999999999999999"],
            ["--seed (seed) must be in [0, 4294967295], got 99999999999999999999999"],
        ),
        (["--seed", "-1"], ["--seed (seed) must be in [0, 4294967295], got -1"]),
        (["--img-size", "4"], ["--img-size (img_size) must be in [8, 4096], got 4"]),
        (["--img-size", "100000"], ["--img-size (img_size) must be in [8, 4096], got 100000"]),
        (["--eval-images", "0"], ["--eval-images (eval_images) must be in [1, 100000], got 0"]),
        (["--figure-images", "0"], ["--figure-images (figure_images) must be in [1, 64], got 0"]),
        # a --set value YAML cannot read: a yaml.YAMLError traceback before
        (["--set", "betas=[0.9,"], ["--set betas=[0.9,: not a valid value", "write a list as [0.9, 0.95]"]),
        (["--set", "task_args={a"], ["--set task_args={a: not a valid value"]),
        (["--batch-size", "-8"], ["--batch-size (batch_size) must be in [1, 65536], got -8"]),
        (["--epochs", "0"], ["--epochs (epochs) must be in [1, 100000], got 0"]),
        (
            ["--max-steps-per-epoch", "0"],
            ["--max-steps-per-epoch (max_steps_per_epoch) must be in [1, 100000000], got 0"],
        ),
        (["--clip-grad", "-1"], ["--clip-grad (clip_grad) must be in (0, 1000000], got -1.0"]),
        (["--warmup-epochs", "-1"], ["--warmup-epochs (warmup_epochs) must be in [0, 100000], got -1.0"]),
        (["--batch-size", "512"], ["320 training images, fewer than one batch of 512", "lower --batch-size"]),
        (["--device", "tpu0"], ["unknown device 'tpu0'"]),
    ],
)
def test_bad_settings(args, expected):
    fails_cleanly(FAST + args, *expected)


def test_a_config_file_value_yaml_cannot_read(tmp_path):
    """A quoted value is read as the field's type, as a --set value is: a yaml.YAMLError traceback before."""
    (tmp_path / "run.yaml").write_text('betas: "[0.9,"\n')
    fails_cleanly(
        FAST + ["--config", tmp_path / "run.yaml"],
        f"config file '{tmp_path / 'run.yaml'}': betas: [0.9,: not a valid value",
    )
    (tmp_path / "three.yaml").write_text("betas: [0.9, 0.95, 0.99]\n")
    three = tmp_path / "three.yaml"
    fails_cleanly(FAST + ["--config", three], f"config file '{three}': betas must be two numbers in [0, 1)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without a GPU")
def test_cuda_without_a_gpu():
    fails_cleanly(FAST + ["--device", "cuda"], "no CUDA GPU is available", "--device cpu")


def test_debug_shows_the_traceback():
    result, _ = run_cli(["--debug"] + FAST + ["--task", "colorisation"])
    assert isinstance(result.exception, PretextsError) and result.exit_code != 2


# ---- data ---------------------------------------------------------------------------------------
def test_missing_empty_and_misshapen_data_folders(tmp_path):
    fails_cleanly(FAST + ["--data", str(tmp_path / "nope")], "does not exist", "'sample' or 'synthetic'")
    (tmp_path / "file.png").write_bytes(b"x")
    fails_cleanly(FAST + ["--data", str(tmp_path / "file.png")], "is a file")
    (tmp_path / "empty").mkdir()
    fails_cleanly(FAST + ["--data", str(tmp_path / "empty")], "no images found", "expected class folders")
    loose = tmp_path / "loose"
    copy_sample_images(loose, 2, classes=("x",))
    for path in (loose / "x").iterdir():
        path.rename(loose / path.name)
    (loose / "x").rmdir()
    fails_cleanly(
        ["finetune", "--from-scratch", "--backbone", "resnet18", "--data", str(loose)],
        "lie directly in it, without labels",
        "class folders",
    )
    copy_sample_images(tmp_path / "oneempty", 5, classes=("a",))
    (tmp_path / "oneempty" / "b").mkdir()
    fails_cleanly(
        FAST + ["--data", str(tmp_path / "oneempty")],
        "no images found in class folder",
        "oneempty/b",
        "remove the folder",
    )


def test_a_folder_with_no_readable_image(tmp_path):
    (tmp_path / "bad" / "a").mkdir(parents=True)
    (tmp_path / "bad" / "a" / "zero.png").write_bytes(b"")
    (tmp_path / "bad" / "a" / "text.jpg").write_text("not an image")
    fails_cleanly(FAST + ["--data", str(tmp_path / "bad")], "none of the 2 image files", "zero.png: empty file")


def write_bad_and_odd_images(folder):
    """Three unreadable files, and readable ones in every mode a user may have."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "zero.png").write_bytes(b"")
    (folder / "notes.png").write_text("not an image")
    good = sorted(SAMPLE_DIR.glob("train/*/*.png"))[0].read_bytes()
    (folder / "cut.png").write_bytes(good[: len(good) // 2])
    ramp = np.linspace(0, 65535, 40 * 40).reshape(40, 40).astype(np.uint16)
    Image.fromarray(ramp).save(folder / "gray16.png")
    Image.new("L", (40, 40), 128).save(folder / "gray.png")
    Image.new("RGBA", (40, 40), (255, 0, 0, 0)).save(folder / "transparent.png")
    Image.new("P", (40, 40), 3).save(folder / "palette.gif")
    Image.new("CMYK", (40, 40), (0, 255, 0, 0)).save(folder / "cmyk.jpg")
    Image.new("RGB", (7, 5), (0, 0, 255)).save(folder / "tiny.png")


def test_unreadable_images_are_skipped_and_listed_and_odd_modes_train(tmp_path):
    data, out = tmp_path / "data", tmp_path / "run"
    copy_sample_images(data, 6)
    write_bad_and_odd_images(data / "a")
    result, _ = run_cli(FAST + ["--data", data, "--out", out])
    assert result.exit_code == 0, result.output
    assert "skipped 3 unreadable images" in result.output and "skipped_images.txt" in result.output
    assert "1 image is smaller than 32 px; the random crop upscales them" in result.output
    listed = dict(line.split("\t") for line in (out / "skipped_images.txt").read_text().splitlines())
    # a .gif is no extension ImageFolder reads: listed, not left out without a word
    assert {p.rsplit("/", 1)[1] for p in listed} == {"zero.png", "notes.png", "cut.png", "palette.gif"}
    assert "left out 1 file of formats not read (.gif;" in result.output
    assert "empty file (0 bytes)" in listed[str(data / "a" / "zero.png")]
    assert "cannot identify image file" in listed[str(data / "a" / "notes.png")]
    assert load_checkpoint(out / "checkpoint.pt")["global_step"] == 1


def test_data_without_a_val_split_trains_and_says_why_no_held_out_error_is_measured(tmp_path):
    data, out = tmp_path / "data", tmp_path / "run"
    copy_sample_images(data / "train", 6)
    result, _ = run_cli(FAST + ["--data", data, "--out", out])
    assert result.exit_code == 0, result.output
    assert f"'{data}' has no val/ split, so no held-out restoration error is measured" in result.output
    assert "held_out" not in json.loads((out / "results.json").read_text())


def test_conversion_to_8bit_rgb(tmp_path):
    from pretexts.engine.data.image_check import load_rgb

    write_bad_and_odd_images(tmp_path)
    rgb = {p.name: np.asarray(load_rgb(str(p))) for p in tmp_path.iterdir() if p.stem not in ("zero", "notes", "cut")}
    assert all(a.dtype == np.uint8 and a.ndim == 3 and a.shape[2] == 3 for a in rgb.values())
    ramp = rgb["gray16.png"][..., 0].ravel()
    assert ramp[0] == 0 and ramp[-1] == 255 and 120 <= np.median(ramp) <= 135  # scaled, not clipped at 255
    assert (rgb["gray.png"] == 128).all()
    assert (rgb["transparent.png"] == 255).all()  # fully transparent -> the white background
    assert rgb["cmyk.jpg"][..., 1].mean() < 30 and rgb["cmyk.jpg"][..., 0].mean() > 220  # magenta
    assert rgb["tiny.png"].shape == (5, 7, 3)


def test_a_file_that_fails_only_when_decoded_is_replaced_by_the_next(tmp_path, capsys):
    """A JPEG cut in its pixel data passes the scan; at load it is reported and the next image served."""
    from pretexts.engine.data.datasets import build_source
    from pretexts.engine.data.image_check import read_or_substitute
    from pretexts.engine.data.warn_once import WarnOnce

    copy_sample_images(tmp_path, 3, classes=("a",))
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(tmp_path / "a" / "0000_cut.jpg", quality=95)
    data = (tmp_path / "a" / "0000_cut.jpg").read_bytes()
    (tmp_path / "a" / "0000_cut.jpg").write_bytes(data[: int(len(data) * 0.7)])
    source = build_source(str(tmp_path / "a" / ".."), "train")
    names = [p.rsplit("/", 1)[1] for p, _ in source.dataset.samples]
    assert "0000_cut.jpg" in names and not source.dataset.scan.bad  # the scan cannot see it
    cut = names.index("0000_cut.jpg")
    image, _ = read_or_substitute(source.dataset, cut, WarnOnce())
    assert np.array_equal(np.asarray(image), np.asarray(source.dataset[cut + 1][0]))
    assert "0000_cut.jpg' cannot be read: image file is truncated" in capsys.readouterr().err


def test_a_broken_cifar10_folder_is_named(tmp_path):
    """torchvision's RuntimeError ('Dataset not found or corrupted') was a traceback."""
    folder = tmp_path / "cifar" / "cifar-10-batches-py"
    folder.mkdir(parents=True)
    fails_cleanly(
        FAST + ["--data", tmp_path / "cifar"],
        f"CIFAR-10 folder '{folder}' cannot be read",
        "data_batch_1 is missing (and 6 more of its 7 files)",
        "download it again",
    )
    for name in (
        "data_batch_1",
        "data_batch_2",
        "data_batch_3",
        "data_batch_4",
        "data_batch_5",
        "test_batch",
        "batches.meta",
    ):
        (folder / name).write_bytes(b"\x80\x04\x95\x10")  # a pickle cut after its header
    fails_cleanly(FAST + ["--data", tmp_path / "cifar"], "data_batch_1 is damaged (wrong checksum)")


def test_a_symlink_loop_lists_each_image_once(tmp_path):
    """A link back up the tree made 10 images 410 samples (one copy per level the OS follows)."""
    from pretexts.engine.data.datasets import build_source, image_folder

    data = copy_sample_images(tmp_path / "data", 5)
    (data / "a" / "loop").symlink_to(data / "a")  # the class folder inside itself
    (data / "b" / "up").symlink_to(data)  # the data root inside a class
    (data / "b" / "zz_same.png").symlink_to(next((data / "b").glob("*.png")))  # one file under two names
    folder = image_folder(data)
    assert len(folder.samples) == 10 and folder.targets == [0] * 5 + [1] * 5
    assert len(build_source(str(data), "train")) + len(build_source(str(data), "val")) == 10
    flat = tmp_path / "flat"
    flat.mkdir()
    for path in (data / "a").glob("*.png"):
        (flat / path.name).symlink_to(path)
        (flat / f"copy_{path.name}").symlink_to(path)
    assert len(image_folder(flat, labelled=False).samples) == 5
    (data / "c").symlink_to(data)  # a class folder that is the root: no images of its own
    fails_cleanly(FAST + ["--data", data], "no images found in class folder", "data/c")


@pytest.mark.parametrize(
    "error",
    [
        torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 12.00 GiB. GPU 0 has a total capacity of 79 GiB"),
        RuntimeError(
            "[enforce fail at alloc_cpu.cpp:117] data. DefaultCPUAllocator: can't allocate memory: you tried "
            "to allocate 13000000000 bytes. Error code 12 (Cannot allocate memory)"
        ),
        MemoryError(),
    ],
    ids=["cuda", "cpu", "python"],
)
def test_an_image_size_too_large_for_the_memory_says_so(error):
    """An out-of-memory error in the preflight forward was 'cannot run at image size N ... use a larger
    --img-size' (or, for MemoryError, a traceback)."""
    from pretexts.engine.training.preflight import check_backbone_fits

    def forward(images):
        raise error

    with pytest.raises(ParameterError) as caught:
        check_backbone_fits(torch.nn.Identity(), "vit_base", 4096, torch.device("cpu"), forward)
    message = str(caught.value)
    assert message.startswith("image size 4096 needs about ") and "use a smaller --img-size" in message
    assert "\n" not in message and ("13 GB" in message or error.args == ())


def test_the_preflight_images_themselves_may_not_fit(monkeypatch):
    from pretexts.engine.training import preflight

    def zeros(*shape, **kwargs):
        raise RuntimeError("DefaultCPUAllocator: can't allocate memory: you tried to allocate 402653184 bytes.")

    monkeypatch.setattr(preflight.torch, "zeros", zeros)
    with pytest.raises(ParameterError, match=r"image size 4096 needs about 0.4 GB or more .* use a smaller --img-size"):
        preflight.check_backbone_fits(torch.nn.Identity(), "vit_base", 4096, torch.device("cpu"))


# ---- click's own errors: one line too ----------------------------------------------------------
@pytest.mark.parametrize(
    "args, expected",
    [
        (["train", "--epoch", "3"], ["No such option '--epoch'", "--epochs", "See 'main train --help'."]),
        (["trian"], ["No such command 'trian'", "Did you mean 'train'?", "See 'main --help'."]),
        (["train", "--lr", "abc"], ["'abc' is not a valid float", "See 'main train --help'."]),
        (["train", "--loss", "fast"], ["'fast' is not one of 'auto', 'mse', 'smooth_l1'"]),
        (["list", "-x"], ["No such option '-x'"]),
    ],
)
def test_usage_errors_are_one_line(args, expected):
    """Click printed three lines (Usage, Try, Error) before."""
    result, error = run_cli(args)
    assert result.exit_code == 2 and result.output.strip() == error, result.output
    for text in expected:
        assert text in error, error


def test_help_version_and_ctrl_c_keep_their_exit_codes(monkeypatch):
    assert run_cli(["--help"])[0].exit_code == 0 and run_cli(["train", "--help"])[0].exit_code == 0
    version = run_cli(["--version"])[0]
    assert version.exit_code == 0 and "version" in version.output
    bare = run_cli([])[0]
    assert bare.exit_code == 2 and "Usage:" in bare.output  # `pretexts` alone: the help, as click shows it

    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(type(main), "make_context", interrupted)  # Ctrl-C while the options are read
    result, _ = run_cli(["list"])
    assert result.exit_code == 130 and "Interrupted." in result.output, result.output


def test_a_methods_model_that_fails_its_first_forward_is_not_blamed_on_the_image_size():
    from pretexts.backbones import create_backbone
    from pretexts.engine.training.preflight import check_backbone_fits

    class Net(torch.nn.Module):  # a plugin's model whose head does not fit its backbone's features
        def __init__(self):
            super().__init__()
            self.backbone, self.head = create_backbone("test_convnext", img_size=32), torch.nn.Linear(7, 4)

        def forward(self, images):
            return self.head(self.backbone(images))

    with pytest.raises(ParameterError, match="the Net model failed its first forward at image size 32") as err:
        check_backbone_fits(Net(), "test_convnext", 32, torch.device("cpu"))
    assert "--img-size" not in str(err.value) and isinstance(err.value.__cause__, RuntimeError)
    with pytest.raises(ParameterError, match="cannot run at image size 8.*use a larger --img-size"):
        check_backbone_fits(Net(), "test_convnext", 8, torch.device("cpu"))
