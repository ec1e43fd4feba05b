"""File names holding terminal escape sequences, a newline or a tab (a downloaded folder's, a shard's member) are
shown and listed escaped: nothing reaches the terminal raw, and each OUT/skipped_images.txt record is one line."""

import numpy as np
import pytest
from cli_runs import TRAIN, copy_sample_images, one_torch_thread, run_cli  # noqa: F401 (autouse)
from PIL import Image
from stream_shards import png_of

from pretexts.engine.data.datasets import image_folder
from pretexts.engine.data.image_check import SKIPPED_FILE, escaped
from pretexts.engine.data.streams import first_images, stream_shards
from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError

ESCAPES = "\x1b[2J\x1b[31mEVIL\x1b]0;pwned\x07"  # clears the screen, turns it red, sets the window title
RAW = ("\x1b", "\x07")


def write_cut_jpeg(path):
    """A JPEG cut in its pixel data: the start-up scan passes it, decoding fails."""
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(path, quality=95)
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.7)])


def test_unreadable_files_with_escapes_newlines_and_tabs_are_shown_and_listed_escaped(tmp_path):
    data = tmp_path / "data"
    copy_sample_images(data / "train", 8)
    copy_sample_images(data / "val", 1, split="val")
    names = {"a": f"{ESCAPES}.png", "b": "new\nline.png"}
    for folder, name in names.items():
        (data / "train" / folder / name).write_bytes(b"not an image")
    cut = data / "val" / "a" / "tab\there.jpg"
    write_cut_jpeg(cut)  # fails only when decoded, in the loader: every epoch's evaluation reads it
    result, error = run_cli([*TRAIN, "--data", data, "--out", tmp_path / "run", "--epochs", "1", "--workers", "0"])
    assert result.exit_code == 0, error or result.output
    assert not any(raw in result.output for raw in RAW), repr(result.output)
    assert "a/\\x1b[2J\\x1b[31mEVIL\\x1b]0;pwned\\x07.png: cannot identify image file" in result.output
    assert "b/new\\nline.png: cannot identify image file" in result.output
    assert "tab\\there.jpg' cannot be read: image file is truncated" in result.output
    records = (tmp_path / "run" / SKIPPED_FILE).read_text(encoding="utf-8").splitlines()
    assert sorted(record.split("\t")[0] for record in records) == sorted(
        escaped(str(path)) for path in (data / "train" / "a" / names["a"], data / "train" / "b" / names["b"], cut)
    )
    assert all(record.count("\t") == 1 and not any(raw in record for raw in RAW) for record in records), records


def test_a_class_folder_whose_only_file_has_escapes_is_refused_escaped(tmp_path):
    data = copy_sample_images(tmp_path / "data", 4)
    (data / f"c{ESCAPES}").mkdir()
    (data / f"c{ESCAPES}" / f"{ESCAPES}.png").write_bytes(b"not an image")
    with pytest.raises(DataError) as err:
        image_folder(data)
    message = str(err.value)
    assert "holds no readable image" in message and "\\x1b[2J" in message
    assert not any(raw in message for raw in RAW), repr(message)


def test_a_shard_samples_source_name_with_escapes_is_warned_about_escaped(tmp_path, capsys):
    import datasets

    images = [{"bytes": png_of(0), "path": None}, {"bytes": b"not an image", "path": None}]
    table = datasets.Dataset.from_dict({"image": images, "label": [0, 1], "path": ["a/0.png", f"a/{ESCAPES}\n.png"]})
    table.cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "hf" / "train-00000-of-00001.parquet"))
    capsys.readouterr()
    first_images(stream_shards(str(tmp_path / "hf"), "train"), 2, warn=WarnOnce())  # said once per process else
    warned = capsys.readouterr().err
    assert "image 1 (from 'a/\\x1b[2J\\x1b[31mEVIL\\x1b]0;pwned\\x07\\n.png') of shard" in warned
    assert not any(raw in warned for raw in RAW) and warned.count("\n") == 1, repr(warned)


def test_any_error_line_shows_control_characters_escaped():
    """The CLI's last guard: an error built elsewhere with a raw name still reaches the terminal escaped."""
    from pretexts.cli import user_message

    line = user_message(DataError(f"output folder '{ESCAPES}' cannot be written\n; choose another --out"))
    assert not any(raw in line for raw in RAW) and "\\x1b[2J" in line and "\\x07" in line
    assert line.endswith("cannot be written ; choose another --out") and "\n" not in line


def test_unicode_spaces_and_joiners_in_names_are_shown_as_they_are():
    """macOS names its screenshots with U+202F before "AM": escaping every non-printable character wrote a name
    that is not the file's, so a grep of skipped_images.txt missed it."""
    name = "Screenshot 2024-01-01 at 10.00.00\u202fAM\u00a0\u3000\u200d.png"
    assert escaped(name) == name
    assert escaped("a\u202eb\x1bc\udcff") == "a\\u202eb\\x1bc\\udcff"  # a right-to-left override, ESC, a surrogate
