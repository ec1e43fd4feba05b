"""`energy --images` asks for at least the 2 energies a histogram's spread needs, and a refusal blames what is short:
the option when it asks for fewer, the data when it holds fewer held-out images than that."""

import pytest
from cli_runs import copy_sample_images, fails_cleanly
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts.engine import energy_histogram
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory):
    return write_checkpoint(tmp_path_factory.mktemp("energy") / "ckpt.pt")[0]


def test_one_image_is_refused_as_the_options_range_not_as_short_data(checkpoint, tmp_path):
    args = ["energy", "--checkpoint", checkpoint, "--images", "1", "--workers", "0", "--out", tmp_path / "e.png"]
    error = fails_cleanly(args, "--images", "2<=x")
    assert "--data" not in error and not (tmp_path / "e.png").exists()
    with pytest.raises(ParameterError, match="images must be at least 2"):
        energy_histogram(str(checkpoint), str(tmp_path / "e.png"), images=1)


def test_data_with_one_held_out_image_is_named_as_the_shortage(checkpoint, tmp_path):
    data = tmp_path / "data"
    copy_sample_images(data / "train", 4)
    copy_sample_images(data / "val", 1, classes=("a",), split="val")
    args = ["energy", "--checkpoint", checkpoint, "--data", data, "--images", "8", "--workers", "0"]
    fails_cleanly([*args, "--out", tmp_path / "e.png"], "the data gave 1 held-out image", "--data")
