"""The Python API page keeps its word: every pretexts name docs/plugins.md uses is documented in docs/api.md, every
built-in method is rendered there with a docstring of its own, each run function's docstring names every key of the
results it returns, and the reported percentages read as the percent they are."""

import ast
import importlib
import inspect
import re
import types

import pytest
import torch
from cli_runs import copy_sample_images
from docs_blocks import ROOT, read_blocks
from pretrained_checkpoints import SMALL_DATA, single_thread  # noqa: F401 (a fixture)

from pretexts import engine
from pretexts.engine.data.datasets import build_source, held_out_split
from pretexts.engine.evaluation.finetune_report import measured_on
from pretexts.engine.evaluation.probe import probe_head, train_head

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread

API_PAGE, PLUGINS_PAGE = "docs/api.md", "docs/plugins.md"


def resolve(path: str):
    """The object a dotted path names, as mkdocstrings finds it: the longest importable module, then attributes."""
    parts = path.split(".")
    for cut in range(len(parts), 0, -1):
        try:
            found = importlib.import_module(".".join(parts[:cut]))
        except ImportError:
            continue
        for name in parts[cut:]:
            found = getattr(found, name)
        return found
    raise ImportError(path)


def is_module(path: str) -> bool:
    try:
        return isinstance(resolve(path), types.ModuleType)
    except (ImportError, AttributeError):
        return False


def names_used(page: str) -> set[str]:
    """The pretexts names a page's Python imports or reads as `engine.X` / `pretexts.X`, and those its prose
    names in backticks (`StateAdapter`, `@register_state_kind(...)`) from a module it names in backticks."""
    text = (ROOT / page).read_text(encoding="utf-8")
    used = set()
    for block in read_blocks(text, page):
        if block.language != "python":
            continue
        for node in ast.walk(ast.parse(block.source)):
            if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("pretexts"):
                used |= {f"{node.module}.{alias.name}" for alias in node.names}
            elif isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
                base = {"pretexts": "pretexts", "engine": "pretexts.engine"}.get(node.value.id)
                used |= {f"{base}.{node.attr}"} if base else set()
    modules = [path for path in re.findall(r"`(pretexts(?:\.\w+)+)`", text) if is_module(path)]
    for groups in re.findall(r"`(?:@([A-Za-z_]\w*)\(|([A-Za-z_]\w*)`)", text):
        used |= {f"{module}.{''.join(groups)}" for module in modules if hasattr(resolve(module), "".join(groups))}
    return {
        path
        for path in used
        if not is_module(path) and getattr(resolve(path), "__module__", "").startswith("pretexts")  # not torch's
    }


def rendered() -> list:
    """The objects the API page renders (`::: path`)."""
    text = (ROOT / API_PAGE).read_text(encoding="utf-8")
    return [resolve(path) for path in re.findall(r"^::: ([\w.]+)", text, re.MULTILINE)]


def test_every_pretexts_name_the_plugins_page_uses_is_documented_in_the_api_page():
    """plugins.md says the Python API documents every name it uses: rendered there, or named there in full (as
    `pretexts.engine.register_method(name)`, which is `METHODS.register`)."""
    objects = rendered()
    named = set(re.findall(r"`(pretexts(?:\.\w+)+)", (ROOT / API_PAGE).read_text(encoding="utf-8")))
    used = names_used(PLUGINS_PAGE)
    assert {"pretexts.engine.Figure", "pretexts.base.rand", "pretexts.engine.methods.states.StateAdapter"} <= used
    missing = [p for p in used if p not in named and not any(resolve(p) is obj or resolve(p) == obj for obj in objects)]
    assert not missing, f"{PLUGINS_PAGE} uses these, {API_PAGE} documents none of them: {sorted(missing)}"


def test_every_built_in_method_is_on_the_api_page_with_a_docstring_of_its_own():
    """Its own, not the `Method` base's: the page renders each with `members: false`, so that is all it shows."""
    objects = rendered()
    built_in = [cls for cls in engine.list_methods().values() if cls.__module__.startswith("pretexts.engine.methods")]
    assert len(built_in) >= 4  # energy, ae, mae, simmim
    for cls in built_in:
        assert cls in objects, f"{cls.__qualname__} is a built-in method that {API_PAGE} does not render"
        assert (vars(cls).get("__doc__") or "").strip(), f"{cls.__qualname__} has no docstring of its own"


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The results of one tiny run of each: pretrain (with a val split and the monitor), fine-tune on class folders
    without val/, probe and export."""
    root = tmp_path_factory.mktemp("api")
    quiet = dict(workers=0, quiet=True)
    pretrained = engine.pretrain(
        engine.PretrainConfig(
            backbone="test_convnext",
            data="sample",
            epochs=1,
            batch_size=8,
            max_steps_per_epoch=1,
            eval_images=8,
            monitor_images=16,
            figure_images=2,
            out=str(root / "pre"),
            **quiet,
        )
    )
    checkpoint = str(root / "pre" / "checkpoint.pt")
    folders = copy_sample_images(root / "classes", 20, classes=("cat", "dog"))  # no val/: 5 % held out
    settings = {**SMALL_DATA, "batch_size": 8}
    tuned = engine.finetune(
        engine.FinetuneConfig(
            checkpoint=checkpoint, data=str(folders), epochs=1, max_steps_per_epoch=1, out=str(root / "ft"), **settings
        ),
        echo=lambda line: None,
    )
    probed = engine.run_probe(
        engine.ProbeConfig(
            checkpoint=checkpoint,
            data="sample",
            probes=("linear", "knn"),
            probe_args={"epochs": 1},
            out=str(root / "probe"),
            **quiet,
        ),
        echo=lambda line: None,
    )
    exported = engine.export_backbone(checkpoint, str(root / "export"))
    return {"pretrain": pretrained, "finetune": tuned, "run_probe": probed, "export_backbone": exported}


@pytest.mark.parametrize("function", ["pretrain", "finetune", "run_probe", "export_backbone"])
def test_a_run_functions_returns_section_names_every_key_it_returns(runs, function):
    results = runs[function]
    doc = inspect.getdoc(getattr(engine, function))
    assert "Returns:" in doc
    keys = {*results, *results.get("reference", {})} - {"linear", "knn"}  # a probe's entry goes under its name
    if function == "pretrain":
        assert {"held_out", "monitor"} <= set(results)
        keys |= {"interrupted", "exit_code"}  # a stopped run's
    undocumented = [key for key in sorted(keys) if f"`{key}`" not in doc]
    assert not undocumented, f"{function}'s docstring does not name {undocumented}"


def test_fine_tune_results_say_what_the_top1_was_measured_on(runs):
    """A folder of class folders without val/ is split: the results say so, not 'on val/'."""
    results = runs["finetune"]
    assert results["val_images"] == 2  # 5 % of 40
    assert results["accuracy"] == (
        "top-1 in percent on 2 of the data's 40 images, held out (5 % of each class, the same whatever --seed) as it "
        "has no val/"
    )
    assert measured_on(build_source("sample", "val")) == "val/"
    assert measured_on(build_source("synthetic", "val")) == "the data's val split"
    assert measured_on(held_out_split(build_source("sample", "val"), "val", 0)).startswith("4 of the data's 80")


def test_the_probe_top1_reads_as_the_percent_it_is():
    """8 right of 50 is 16.0 %: not float32's 15.999999642372131."""
    generator = torch.Generator().manual_seed(0)
    features = torch.cat([torch.randn(20, 4, generator=generator) + 5, torch.randn(20, 4, generator=generator) - 5])
    labels = torch.tensor([0] * 20 + [1] * 20)
    val_features = torch.cat([torch.randn(50, 4, generator=generator) + 5])  # all of class 0's cluster
    val_labels = torch.tensor([0] * 8 + [1] * 42)
    torch.manual_seed(0)
    head = probe_head("linear", 4, 2)
    top1 = train_head(
        head, (features, labels), (val_features, val_labels), 0, epochs=20, batch_size=8, lr=0.05, weight_decay=0.0
    )
    assert top1 == 16.0
