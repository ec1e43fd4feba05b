"""Find a streaming data set's shards and their sample counts: WebDataset tar shards (a `pretexts shard` folder with
its manifest, a folder of .tar files, a brace pattern) or Hugging Face parquet files (flat, under data/, or in train/
and val/ subfolders).

Counts come from the manifest when there is one, else from the files themselves: a tar's distinct sample keys (its
headers only) or a parquet file's metadata. A file's split comes from its name: 'train...' is train; 'val...',
'validation...' or 'test...' is val; with no split prefix at all every file is train.
"""

import importlib
import json
import math
import os
import re
import tarfile
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from itertools import islice
from pathlib import Path

from pretexts.engine.data.warn_once import WarnOnce
from pretexts.errors import DataError

MANIFEST = "manifest.json"
MANIFEST_FORMAT = "pretexts-shards/1"
BRACE = re.compile(r"\{(\d+)\.\.(\d+)\}")
BRACE_SPLIT = re.compile(r"(\{\d+\.\.\d+\})")
IMAGE_COLUMNS = ("image", "img", "jpg", "png", "webp")
LABEL_COLUMNS = ("label", "labels", "cls", "target", "fine_label")
SPLIT_FOLDERS = {"train": ("train",), "val": ("val", "validation", "test")}
TAR_META = re.compile(r"__[^/]*__($|/)")  # the tar members webdataset skips (tar_file_iterator's skip_meta)


@dataclass
class ShardSet:
    """One split's shards, in their own order, with each shard's sample count."""

    kind: str  # "wds" or "parquet"
    urls: list[str]
    counts: list[int]
    classes: list[str] | None
    image_column: str = "image"  # parquet only: the column of image bytes
    label_column: str | None = None  # parquet only: the integer label column (None: every label is 0)

    def __len__(self) -> int:
        return sum(self.counts)


def is_stream(spec: str) -> bool:
    """Whether `spec` names shards rather than an image folder: a brace pattern or a .tar path, a folder holding
    manifest.json or .tar files, or a folder holding .parquet files (itself, its data/, or its train/ and val/)."""
    spec = str(spec)
    if BRACE.search(spec) or spec.endswith(".tar"):
        return True
    root = Path(spec).expanduser()
    if not root.is_dir():
        return False
    return (root / MANIFEST).is_file() or any(root.glob("*.tar")) or bool(parquet_layout(root))


def stream_shards(spec: str, split: str) -> ShardSet | None:
    """The `split` ("train" or "val") of the shards named by `spec`, or None when the data has no such split.
    DataError naming the path for an empty, missing or unreadable set."""
    spec = str(spec)
    if BRACE.search(spec) or spec.endswith(".tar"):
        return pattern_shards(spec, split)
    root = Path(spec).expanduser()
    if not root.is_dir():
        raise DataError(f"shard path '{spec}' does not exist; give a folder of .tar or .parquet files or a pattern.")
    if (root / MANIFEST).is_file():
        return manifest_shards(root, split)
    tars = sorted(root.glob("*.tar"))
    if tars:
        warn_if_unfinished(root, tars)
        files = files_of_split(tars, split, root)
        return None if files is None else tar_set(files, {})
    layout = parquet_layout(root)
    if layout:
        files = layout(split)
        return None if files is None else parquet_set(files)
    raise DataError(
        f"'{spec}' holds no manifest.json, .tar or .parquet files; give a `pretexts shard` folder, a folder of "
        "WebDataset .tar shards or of Hugging Face .parquet files."
    )


SHARD_NAME = re.compile(r"(train|val)-\d{6}\.tar")  # the names `pretexts shard` writes its shards under
UNFINISHED = WarnOnce()  # a folder warned about once, whichever process reads it first


def warn_if_unfinished(root: Path, tars: list[Path]) -> None:
    """A warning for a folder of `pretexts shard`'s shard names without the manifest.json it writes last: a pack
    stopped early leaves whole tars that read as a smaller set. Other tools' shards are read as they are."""
    if all(SHARD_NAME.fullmatch(p.name) for p in tars):
        UNFINISHED(
            str(root),
            f"'{root}' holds shards named as `pretexts shard` writes them but no {MANIFEST}, which it writes last: "
            f"the set may be incomplete (a pack stopped early); write it again with `pretexts shard SOURCE {root} "
            f"--force`.",
        )


def split_of(name: str) -> str | None:
    name = name.lower()
    if name.startswith("train"):
        return "train"
    if name.startswith("val"):  # val- and validation-
        return "val"
    return "test" if name.startswith("test") else None


def files_of_split(files: list[Path], split: str, root: Path) -> list[Path] | None:
    """The files of `split` by their names' prefixes (a val split falls back to test files)."""
    groups: dict[str | None, list[Path]] = {}
    for path in files:
        groups.setdefault(split_of(path.name), []).append(path)
    if list(groups) == [None]:
        return files if split == "train" else None
    if None in groups:
        raise DataError(
            f"'{root}' mixes files named by split (train-, val-, test-) with others such as '{groups[None][0].name}'; "
            "give every file a split prefix or none."
        )
    return groups.get("train") if split == "train" else groups.get("val") or groups.get("test")


def manifest_shards(root: Path, split: str) -> ShardSet | None:
    manifest = read_manifest(root)
    if split not in manifest["splits"]:
        return None
    names = manifest["splits"][split]["shards"]
    counts = manifest["splits"][split]["counts"]
    if len(names) != len(counts) or not names:
        raise DataError(f"'{root / MANIFEST}' lists {len(names)} {split} shards and {len(counts)} counts; rewrite it.")
    missing = [name for name in names if not (root / name).is_file()]
    if missing:
        raise DataError(f"shard '{root / missing[0]}' listed in {MANIFEST} is missing ({len(missing)} missing).")
    return ShardSet("wds", [str(root / name) for name in names], [int(c) for c in counts], manifest.get("classes"))


def read_manifest(root: Path) -> dict:
    path = root / MANIFEST
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as err:
        raise DataError(f"'{path}' cannot be read: {err}; rewrite it with `pretexts shard`.") from None
    if not isinstance(manifest, dict) or manifest.get("format") != MANIFEST_FORMAT:
        raise DataError(f"'{path}' is not a {MANIFEST_FORMAT} manifest; rewrite it with `pretexts shard`.")
    if not isinstance(manifest.get("splits"), dict):
        raise DataError(f"'{path}' has no splits; rewrite it with `pretexts shard`.")
    for split, entry in manifest["splits"].items():
        problem = split_problem(entry)
        if problem:
            raise DataError(f"'{path}': split '{split}' {problem}; rewrite it with `pretexts shard`.")
    classes = manifest.get("classes")
    if classes is not None and not (isinstance(classes, list) and all(isinstance(c, str) for c in classes)):
        raise DataError(
            f"'{path}': classes must be a list of names, got {classes!r}; rewrite it with `pretexts shard`."
        )
    return manifest


def split_problem(entry) -> str | None:
    """What is wrong with one split of a manifest ({"shards": [names], "counts": [whole numbers >= 0]}), or None."""
    if not isinstance(entry, dict):
        return f"must be a mapping with 'shards' and 'counts', got {type(entry).__name__}"
    shards, counts = entry.get("shards"), entry.get("counts")
    if not (isinstance(shards, list) and all(isinstance(name, str) for name in shards)):
        return f"must list its shards as file names, got {shards!r}"
    if not isinstance(counts, list):
        return f"must list its counts, got {counts!r}"
    bad = [c for c in counts if isinstance(c, bool) or not isinstance(c, int) or c < 0]
    if bad:
        return f"has a count {bad[0]!r}; counts must be whole numbers >= 0"
    return None


def manifest_entries(root: Path) -> tuple[dict[str, int], list[str] | None]:
    """({shard file name: count}, class names) from root/manifest.json, or ({}, None) without one (a pattern's folder
    may hold it)."""
    if not (root / MANIFEST).is_file():
        return {}, None
    manifest = read_manifest(root)
    splits = manifest["splits"].values()
    known = {name: int(count) for s in splits for name, count in zip(s.get("shards", []), s.get("counts", []))}
    return known, manifest.get("classes")


def pattern_shards(spec: str, split: str) -> ShardSet | None:
    """A brace pattern (or one .tar path) names train; val is the same pattern with its last 'train' -> 'val' or
    'validation', over whatever numbers exist (a val set usually has fewer shards)."""
    path = Path(spec).expanduser()
    known, classes = manifest_entries(path.parent) if path.parent.is_dir() else ({}, None)
    if split == "train":
        files = [Path(p) for p in expand(str(path))]
        missing = [p for p in files if not p.is_file()]
        if missing:
            raise DataError(
                f"shard '{missing[0]}' of '{spec}' does not exist ({len(missing)} of {len(files)} missing)."
            )
        return tar_set(files, known, classes)
    head, found, tail = str(path).rpartition("train")
    if not found:
        return None
    for name in ("val", "validation"):
        files = existing_matches(head + name + tail)
        if files:
            return tar_set(files, known, classes)
    return None


def require(module: str, extra: str, doing: str = "reading these shards"):
    """Import an optional reader (or writer), or DataError saying which extra installs it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise DataError(f'{doing} needs {module}: pip install "pretexts[{extra}]".') from None


MAX_PATTERN_SHARDS = 1_000_000


def expand(pattern: str) -> list[str]:
    """The names a brace pattern stands for (braceexpand, installed with webdataset); at most MAX_PATTERN_SHARDS,
    counted before they are listed (ten million names would take minutes and gigabytes)."""
    # ranges side by side multiply exactly; a range inside an alternation {a,b} may not, so braceexpand counts then
    ranges = 0 if "," in pattern else math.prod(abs(int(b) - int(a)) + 1 for a, b in BRACE.findall(pattern))
    if ranges <= MAX_PATTERN_SHARDS:
        names = list(islice(require("braceexpand", "wds").braceexpand(pattern), MAX_PATTERN_SHARDS + 1))
        if len(names) <= MAX_PATTERN_SHARDS:
            return names
    raise DataError(
        f"the pattern '{pattern}' names more than {MAX_PATTERN_SHARDS:,} shards; name the shards that exist "
        f"(a smaller range, or the folder that holds them)."
    )


def existing_matches(pattern: str) -> list[Path]:
    """The existing files that `pattern` matches with each {a..b} read as any number, sorted."""
    folder, name = os.path.split(pattern)
    regex = re.compile("".join(r"\d+" if BRACE.fullmatch(p) else re.escape(p) for p in BRACE_SPLIT.split(name)))
    root = Path(folder or ".")
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if regex.fullmatch(p.name) and p.is_file())


def tar_set(files: list[Path], known: dict[str, int], classes: list[str] | None = None) -> ShardSet:
    """A WebDataset set of `files`, counted by their manifest entry or else their tar headers; the manifest's class
    names hold only when it lists every one of the files (a pattern over the folder `pretexts shard` wrote)."""
    with ThreadPoolExecutor(max_workers=8) as pool:
        counts = list(pool.map(lambda p: known.get(p.name) or count_tar_samples(p), files))
    listed = all(p.name in known for p in files)
    return ShardSet("wds", [str(p) for p in files], counts, classes if listed else None)


def count_tar_samples(path: Path) -> int:
    """The samples webdataset reads from a tar, counted from its headers as webdataset groups them: each run of
    regular members with one key (the path up to the first dot of the name; a name without one, such as README or
    ._x.jpg, has none and is skipped), leaving out its metadata (__name__). DataError for an unreadable, truncated
    or empty tar."""
    base_plus_ext = require("webdataset", "wds").tariterators.base_plus_ext
    size, samples, last = path.stat().st_size, 0, None
    try:
        with tarfile.open(path, "r:") as tar:
            for member in tar:
                if member.offset_data + member.size > size:
                    raise DataError(f"shard '{path}' is truncated (ends inside '{member.name}'); write it again.")
                key = base_plus_ext(member.name)[0] if member.isreg() else None
                if key is not None and not TAR_META.match(member.name):
                    samples, last = samples + (key != last), key
    except (tarfile.TarError, OSError) as err:
        raise DataError(f"shard '{path}' is not a readable tar file ({err}); write it again.") from None
    if not samples:
        raise DataError(f"shard '{path}' holds no samples; write it again or remove it.")
    return samples


def parquet_layout(root: Path):
    """A function split -> parquet files (or None) for the layouts Hugging Face writes, or None without parquet."""
    for folder in (root, root / "data"):
        files = sorted(folder.glob("*.parquet"))
        if files:
            return lambda split, files=files, folder=folder: files_of_split(files, split, folder)
    subfolders = {split: [root / n for n in names if (root / n).is_dir()] for split, names in SPLIT_FOLDERS.items()}
    by_split = {split: sorted(folders[0].glob("*.parquet")) if folders else [] for split, folders in subfolders.items()}
    if any(by_split.values()):
        return lambda split: by_split.get(split) or None
    return None


def parquet_set(files: list[Path]) -> ShardSet:
    """A parquet set: row counts from each file's metadata; the image and label columns (and the class names) from
    the Hugging Face features stored in the schema, else from the usual column names."""
    pq = require("pyarrow.parquet", "hf")  # installed with datasets
    counts, schemas = [], []
    for path in files:
        try:
            metadata = pq.ParquetFile(path).metadata
        except (OSError, ValueError) as err:  # pyarrow's ArrowInvalid is a ValueError
            raise DataError(f"parquet file '{path}' cannot be read ({err}); write it again.") from None
        counts.append(metadata.num_rows)
        schemas.append(metadata.schema.to_arrow_schema())
        hf_features(schemas[-1], path)  # each file's, as each is read with its own
    if not sum(counts):
        raise DataError(f"the parquet files under '{files[0].parent}' hold no rows.")
    image, label, classes = parquet_columns(schemas[0], files[0])
    return ShardSet("parquet", [str(p) for p in files], counts, classes, image, label)


def parquet_columns(schema, path: Path) -> tuple[str, str | None, list[str] | None]:
    features = hf_features(schema, path)
    kind = {name: (feature.get("_type") if isinstance(feature, dict) else None) for name, feature in features.items()}
    image = next((n for n in schema.names if kind.get(n) == "Image"), None)
    image = image or next((n for n in IMAGE_COLUMNS if n in schema.names), None)
    if image is None:
        raise DataError(f"parquet file '{path}' has no image column (columns: {', '.join(schema.names)}).")
    label = next((n for n in schema.names if kind.get(n) == "ClassLabel"), None)
    label = label or next((n for n in LABEL_COLUMNS if n in schema.names), None)
    classes = features[label].get("names") if label and kind.get(label) == "ClassLabel" else None
    return image, label, classes


def hf_features(schema, path: Path) -> dict:
    """The Hugging Face features a parquet file's schema records ({} for none), checked as datasets reads them;
    DataError naming the file for metadata it cannot read (datasets would fail with a traceback)."""
    if not schema.metadata or b"huggingface" not in schema.metadata:
        return {}
    try:
        features = json.loads(schema.metadata[b"huggingface"]).get("info", {}).get("features") or {}
        if not isinstance(features, dict):
            raise TypeError(f"its features are a {type(features).__name__}, not a mapping")
        require("datasets", "hf").Features.from_arrow_schema(schema)  # raises what the reader would
        for name, feature in features.items():  # datasets takes any list as class names
            names = feature.get("names") if isinstance(feature, dict) and feature.get("_type") == "ClassLabel" else []
            if names is not None and not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
                raise TypeError(f"the class names of '{name}' are {str(names)[:100]}, not a list of names")
    except (ValueError, TypeError, AttributeError, KeyError, RecursionError) as err:  # json's are ValueErrors
        raise metadata_error(path, str(err).split(". ")[0][:200] or type(err).__name__) from None
    return features


def metadata_error(path, why: str) -> DataError:
    return DataError(
        f"parquet file '{path}' has Hugging Face metadata (its schema's 'huggingface' entry) that cannot be read "
        f"({why}); write the file again, or remove that entry."
    )
