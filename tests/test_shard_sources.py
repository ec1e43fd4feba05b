"""A shard's sample that cannot be decoded is named by the file it was packed from: `pretexts shard` records each
sample's path relative to the folder it packed (a tar's `KEY.path.txt`) and that folder in its manifest, a parquet file
may hold a `path` column or cells of paths, and the warning and OUT/skipped_images.txt name it; shards without a path
(other tools') read and warn as before."""

import shutil
import tarfile

import numpy as np
from PIL import Image
from stream_shards import LabelItem, png_of, read_epoch, write_tars

from pretexts.engine.data.image_check import SKIPPED_FILE, list_decode_failures
from pretexts.engine.data.shard_writer import write_shards
from pretexts.engine.data.streams import ImageStream, first_images, stream_shards
from pretexts.engine.data.warn_once import WarnOnce
from pretexts.engine.training.file_writes import write_text


def write_cut_jpeg(path):
    """A JPEG cut in its pixel data: the shard writer's scan passes it, decoding fails."""
    noise = np.random.default_rng(0).integers(0, 256, (64, 64, 3), dtype=np.uint8)
    Image.fromarray(noise).save(path, quality=95)
    path.write_bytes(path.read_bytes()[: int(path.stat().st_size * 0.7)])


def folder_with_a_cut_jpeg(root):
    """train/a: 3 PNGs and a cut JPEG; train/b: 4 PNGs."""
    for cls, count in (("a", 3), ("b", 4)):
        (root / "train" / cls).mkdir(parents=True)
        for n in range(count):
            (root / "train" / cls / f"{n}.png").write_bytes(png_of(n))
    write_cut_jpeg(root / "train" / "a" / "cut.jpg")
    return root


def test_each_sample_records_its_path_and_a_failing_one_is_named_by_it(tmp_path, capfd):
    source = folder_with_a_cut_jpeg(tmp_path / "photos")
    out = tmp_path / "shards"
    write_shards(source, out, shard_size=4, shuffle=False)
    paths = {}
    for shard in sorted(out.glob("train-*.tar")):
        with tarfile.open(shard) as tar:
            for member in tar.getmembers():
                key, ext = member.name.split(".", 1)
                if ext == "path.txt":
                    paths[key] = tar.extractfile(member).read().decode()
    assert sorted(paths.values()) == sorted(f"train/{p.parent.name}/{p.name}" for p in source.glob("train/*/*"))

    shards = stream_shards(str(out), "train")
    assert len(first_images(shards, 8)) == 8  # the cut one replaced by the next
    cut_key = next(key for key, path in paths.items() if path == "train/a/cut.jpg")
    warning, cut = capfd.readouterr().err, source.resolve() / "train" / "a" / "cut.jpg"  # the manifest's folder
    assert f"image {cut_key} (from '{cut}') of shard 'train-000000.tar' cannot be read: image file" in warning

    # a training stream's warnings join the run folder's list, by that path
    stream = ImageStream(shards, LabelItem(), workers=2, batch_size=2, shuffle=False)
    assert len(read_epoch(stream, 0, workers=2)) == 4
    run = tmp_path / "run"
    run.mkdir()
    assert list_decode_failures([stream], run, write_text) == 1
    path, why = (run / SKIPPED_FILE).read_text().splitlines()[0].split("\t")
    assert path == str(cut) and why.startswith("image file is truncated")


def test_shards_moved_without_their_manifest_name_the_file_by_its_packed_path(tmp_path, capsys):
    """No manifest beside the shards (or one without the folder packed): the path relative to that folder."""
    source = folder_with_a_cut_jpeg(tmp_path / "photos")
    write_shards(source, tmp_path / "shards", shard_size=4, shuffle=False)
    (tmp_path / "moved").mkdir()
    for shard in (tmp_path / "shards").glob("train-*.tar"):
        shutil.copy(shard, tmp_path / "moved")
    assert len(first_images(stream_shards(str(tmp_path / "moved"), "train"), 8, warn=WarnOnce())) == 8
    assert "(from 'train/a/cut.jpg') of shard 'train-000000.tar'" in capsys.readouterr().err
    manifest = tmp_path / "shards" / "manifest.json"
    manifest.write_text(manifest.read_text().replace(str(source.resolve()), "photos"))  # not a folder to join
    assert len(first_images(stream_shards(str(tmp_path / "shards"), "train"), 8, warn=WarnOnce())) == 8
    assert "(from 'train/a/cut.jpg') of shard 'train-000000.tar'" in capsys.readouterr().err


def test_shards_without_paths_read_and_warn_by_key_and_shard(tmp_path, capsys):
    """Tars written by other tools (no path.txt member): as before; the run folder lists the sample as SHARD:KEY."""
    write_tars(tmp_path / "other", [4, 4], bad=(2,))
    shards = stream_shards(str(tmp_path / "other"), "train")
    stream = ImageStream(shards, LabelItem(), workers=0, batch_size=2, shuffle=False)
    assert [int(label) for batch in read_epoch(stream, 0, workers=0) for label in batch] == [0, 1, 3, 3, 4, 5, 6, 7]
    warning = capsys.readouterr().err
    assert "image 00000002 of shard 'train-000000.tar' cannot be read" in warning and "(from" not in warning
    run = tmp_path / "run"
    run.mkdir()
    assert list_decode_failures([stream], run, write_text) == 1
    assert (run / SKIPPED_FILE).read_text().startswith("train-000000.tar:00000002\tcannot identify image file")


def test_a_parquet_path_column_names_the_sample(tmp_path, capsys):
    import datasets

    images = [{"bytes": png_of(0), "path": None}, {"bytes": b"not an image", "path": None}, {"bytes": png_of(2)}]
    table = datasets.Dataset.from_dict({"image": images, "label": [0, 1, 2], "path": ["a/0.png", "a/1.png", "b/2.png"]})
    table.cast_column("image", datasets.Image()).to_parquet(str(tmp_path / "hf" / "train-00000-of-00001.parquet"))
    shards = stream_shards(str(tmp_path / "hf"), "train")
    assert [label for _, label in first_images(shards, 3)] == [0, 2, 2]
    assert "image 1 (from 'a/1.png') of shard 'train-00000-of-00001.parquet' cannot be read" in capsys.readouterr().err
    # no path column: the name Hugging Face keeps beside an image cell's bytes
    images[1]["path"] = "photos/1.jpg"
    table = datasets.Dataset.from_dict({"image": images, "label": [0, 1, 2]}).cast_column("image", datasets.Image())
    table.to_parquet(str(tmp_path / "cells" / "train.parquet"))
    assert [label for _, label in first_images(stream_shards(str(tmp_path / "cells"), "train"), 3)] == [0, 2, 2]
    assert "image 1 (from 'photos/1.jpg') of shard 'train.parquet' cannot be read" in capsys.readouterr().err


def test_parquet_cells_of_file_paths_are_listed_by_the_path(tmp_path):
    """A cell holding a path, not bytes (a plain string, or a {"bytes": None, "path"} cell): that path, not ROW."""
    import datasets

    for n in range(3):
        (tmp_path / f"{n}.png").write_bytes(png_of(n))
    write_cut_jpeg(tmp_path / "cut.jpg")
    paths = [str(tmp_path / name) for name in ("0.png", "cut.jpg", "2.png")]
    datasets.Dataset.from_dict({"image": paths, "label": [0, 1, 2]}).to_parquet(str(tmp_path / "plain" / "t.parquet"))
    cells = [{"bytes": None, "path": path} for path in paths]
    table = datasets.Dataset.from_dict({"image": cells, "label": [0, 1, 2]}).cast_column("image", datasets.Image())
    table.to_parquet(str(tmp_path / "cells" / "t.parquet"))
    for folder in ("plain", "cells"):
        stream = ImageStream(stream_shards(str(tmp_path / folder), "train"), LabelItem(), batch_size=3, shuffle=False)
        assert [int(label) for batch in read_epoch(stream, 0, workers=0) for label in batch] == [0, 2, 2]
        run = tmp_path / f"run-{folder}"
        run.mkdir()
        assert list_decode_failures([stream], run, write_text) == 1
        path, why = (run / SKIPPED_FILE).read_text().splitlines()[0].split("\t")
        assert path == str(tmp_path / "cut.jpg") and why.startswith("image file is truncated")
