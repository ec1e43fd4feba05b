"""Streamed inputs drawn by hypothesis, in the option fuzzer's style: any value in any manifest field, any label, any
parquet image cell either reads or stops with a PretextsError (one `Error:` line at the CLI), never another
exception: what a user's shards hold cannot crash a run with a traceback."""

import json

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from stream_shards import png_of, write_shard_set

from pretexts.engine.data.streams import first_images, stream_shards
from pretexts.errors import PretextsError

FUZZ = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
ANY = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(-(10**12), 10**12),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=6),
    st.lists(st.one_of(st.integers(-3, 9), st.text(max_size=3)), max_size=3),
    st.dictionaries(st.text(max_size=4), st.integers(-2, 9), max_size=2),
)
# where a value can sit in a manifest: (path of keys, the value's place)
PLACES = [
    ("format",),
    ("classes",),
    ("splits",),
    ("splits", "train"),
    ("splits", "train", "shards"),
    ("splits", "train", "counts"),
    ("splits", "train", "counts", 0),
    ("splits", "train", "shards", 0),
    ("splits", "val", "counts"),
]


def read_both_splits(folder, labelled: bool) -> None:
    for split in ("train", "val"):
        shards = stream_shards(str(folder), split)
        if shards is not None:
            first_images(shards, 2, labelled)


@pytest.fixture(scope="module")
def shard_set(tmp_path_factory):
    folder = write_shard_set(tmp_path_factory.mktemp("fuzz") / "shards", [4, 4], [2])
    return folder, json.loads((folder / "manifest.json").read_text())


@FUZZ
@given(place=st.sampled_from(PLACES), value=ANY, labelled=st.booleans())
def test_any_value_in_any_manifest_field_reads_or_is_refused(shard_set, place, value, labelled):
    folder, manifest = shard_set
    changed = json.loads(json.dumps(manifest))
    target = changed
    for key in place[:-1]:
        target = target[key]
    target[place[-1]] = value
    (folder / "manifest.json").write_text(json.dumps(changed))
    try:
        read_both_splits(folder, labelled)
    except PretextsError:
        pass
    finally:
        (folder / "manifest.json").write_text(json.dumps(manifest))


@FUZZ
@given(labels=st.lists(st.one_of(st.none(), st.integers(-5, 12), st.text(max_size=3)), min_size=4, max_size=4))
def test_any_labels_in_a_shard_read_or_are_refused(tmp_path_factory, labels):
    import webdataset as wds

    folder = tmp_path_factory.mktemp("labels")
    with wds.TarWriter(str(folder / "train-000000.tar")) as writer:
        for n, label in enumerate(labels):
            writer.write({"__key__": f"{n:08d}", "png": png_of(n)} | ({} if label is None else {"cls": str(label)}))
    shards = stream_shards(str(folder / "train-000000.tar"), "train")
    for labelled in (False, True):
        try:
            read = [label for _, label in first_images(shards, 4, labelled)]
        except PretextsError:
            continue
        assert all(isinstance(label, int) and label >= 0 for label in read) or not labelled


@FUZZ
@given(
    cells=st.lists(
        st.one_of(
            st.none(),
            st.binary(max_size=20),
            st.fixed_dictionaries({"bytes": st.one_of(st.none(), st.binary(max_size=8)), "path": st.none()}),
            st.fixed_dictionaries({"bytes": st.none(), "path": st.sampled_from(["missing.png", ".", "ok.png"])}),
        ),
        min_size=3,
        max_size=3,
    )
)
def test_any_parquet_image_cells_read_or_are_refused(tmp_path_factory, cells):
    import pyarrow as pa
    import pyarrow.parquet as pq

    folder = tmp_path_factory.mktemp("parquet")
    (folder / "ok.png").write_bytes(png_of(0))
    structs = [
        {"bytes": c, "path": None} if isinstance(c, bytes) or c is None else c for c in [*cells, png_of(1)]
    ]  # the last cell a good image, so a file can be read past bad cells
    image = pa.array(structs, type=pa.struct([("bytes", pa.binary()), ("path", pa.string())]))
    pq.write_table(pa.table({"image": image, "label": [0, 1, 0, 1]}), folder / "train-00000-of-00001.parquet")
    try:
        first_images(stream_shards(str(folder), "train"), 4, labelled=True)
    except PretextsError:
        pass
