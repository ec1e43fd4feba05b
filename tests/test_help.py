"""What a reader of `--help` relies on: the long commands' options in sections, in order, each under the section its
field declares; every default (and range) written one way; `list --backbones` on one screen."""

import dataclasses
import importlib
import re

import click
import pytest
from click.testing import CliRunner

from pretexts.cli import main
from pretexts.cli.step_costs import EXACT_OVER_SUPERVISED, MEASURED_ON
from pretexts.engine.training.settings import SECTIONS, setting

CONFIGS = {
    "train": "pretexts.engine.training.config:PretrainConfig",
    "finetune": "pretexts.engine.evaluation.finetune_config:FinetuneConfig",
    "probe": "pretexts.engine.evaluation.probe_config:ProbeConfig",
    "segment": "pretexts.engine.evaluation.segmentation.config:SegmentConfig",
    "compare": "pretexts.engine.compare.config:CompareConfig",
}


def help_of(*args: str) -> str:
    result = CliRunner().invoke(main, [*args, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    return result.output


def sections(text: str) -> dict[str, list[str]]:
    """Heading -> the options listed under it (each option's first spelling), in order."""
    listed: dict[str, list[str]] = {}
    heading = None
    for line in text.splitlines():
        if re.fullmatch(r"[A-Z][^:]*:", line):
            heading = line[:-1]
            listed[heading] = []
        elif heading and (match := re.match(r"  (-h, )?(--[a-z0-9-]+)", line)):
            listed[heading].append(match[2])
    return listed


def test_train_help_comes_in_sections_in_order_with_each_option_in_its_own():
    listed = sections(help_of("train"))
    assert list(listed) == [
        "Data",
        "Model",
        "Optimisation",
        "Method options (energy)",
        "Output",
        "Monitoring and logging",
        "Device, speed and memory",
        "Config and help",
    ]
    assert "--data" in listed["Data"] and {"--backbone", "--method", "--task"} <= set(listed["Model"])
    assert {"--lr", "--base-lr", "--epochs"} <= set(listed["Optimisation"])
    assert {"--steps", "--alpha", "--grad-mode", "--method-arg"} <= set(listed["Method options (energy)"])
    assert "--out" in listed["Output"] and "--amp" in listed["Device, speed and memory"]
    assert listed["Config and help"] == ["--config", "--set", "--help"]


def test_train_help_shows_the_selected_methods_options():
    text = help_of("train", "--method", "mae")
    listed = sections(text)
    assert "--mask-ratio" in listed["Method options (mae)"] and "--steps" not in text
    assert "--mask-ratio FLOAT Share of patches masked (MAE: 0.75). [default: 0.75; 0.01<=x<=0.99]" in " ".join(
        text.split()
    )


@pytest.mark.parametrize("command", CONFIGS)
def test_every_option_is_listed_under_the_section_its_field_declares(command):
    module, _, name = CONFIGS[command].partition(":")
    fields = [f for f in dataclasses.fields(getattr(importlib.import_module(module), name)) if "help" in f.metadata]
    listed = sections(help_of(command))
    params = {p.name: p for p in main.commands[command].params}
    for field in fields:
        title = next(t for t in listed if t.startswith(SECTIONS[field.metadata["section"]]))
        assert params[field.name].opts[0] in listed[title], (command, field.name, title)


def all_help() -> list[str]:
    return [
        help_of(*c)
        for c in [(), *([name] for name in main.commands), *(["train", "--method", m] for m in ("ae", "mae", "simmim"))]
    ]


def test_defaults_and_ranges_are_written_one_way():
    texts = all_help()
    for text in texts:
        joined = " ".join(text.split())
        assert not re.search(r"\((int|float|list of \w+) in \[", joined), joined
        assert not re.search(r"[(;,] ?default -?\d", joined), joined  # the old "(int in [1, 9], default 5)"
        assert not re.search(r"(?<!\[)default: \d", joined.replace("[default: ", "")), joined
    probe = " ".join(help_of("probe").split())
    assert "[default: 100; 1<=x<=1000000]" in probe and "[default: 20, 200; 1<=x<=16777216]" in probe
    train = " ".join(help_of("train").split())
    finetune = " ".join(help_of("finetune").split())
    assert "[default: 0.5; 0<x<=1]" in finetune and "[default: 2; 0<=x<=64]" in train


def test_each_multi_value_option_documents_one_spelling():
    """Several values are given one way per option, the way its help says: after one flag, space-separated (the
    command's `list_options`, compare's `--seeds 0 1 2`), or the flag repeated (`--probe linear --probe knn`);
    no help offers commas besides. tests/docs_blocks.py holds the docs' commands to the same spelling."""
    for name, command in main.commands.items():
        spaced = getattr(command, "list_options", ())
        multiple = [p for p in command.params if isinstance(p, click.Option) and p.multiple]
        assert set(spaced) <= {p.opts[0] for p in multiple}, name
        for param in multiple:
            flag, text = param.opts[0], " ".join(param.help.split()).lower()
            if flag in spaced:
                assert f"space-separated: {flag} " in text and "repeatable" not in text, (name, flag, text)
            else:
                assert "repeatable" in text and "space-separated" not in text, (name, flag, text)
            assert "comma" not in text, (name, flag, text)


def test_a_default_shown_is_not_an_options_own_so_a_config_files_value_stands():
    params = {p.name: p for p in main.commands["finetune"].params}
    assert params["min_lr"].default is None and params["min_lr"].show_default == "1e-06"


def test_a_field_must_name_a_known_section():
    with pytest.raises(ValueError, match="section must be one of data, model"):
        setting(1, "A field.", section="misc")


def test_list_backbones_fits_a_screen_and_names_the_default():
    text = CliRunner().invoke(main, ["list", "--backbones"]).output
    lines = text.splitlines()
    assert len(lines) <= 40 and "convnext_atto  convnext_atto (the default)" in text
    for family in ("ViT (vit_*)", "Swin (swin*)", "ConvNeXt (convnext*)", "ResNet (resnet*)"):
        assert any(line.startswith(f"  {family}") for line in lines), family
    vit = next(line for line in lines if line.startswith("  ViT"))
    vit_b = EXACT_OVER_SUPERVISED["ViT-B/16"]  # the generated numbers, as docs/results/gpu-h100.md shows them
    assert "mae" in vit and f"ViT-B/16 {vit_b[32]}x / {vit_b[128]}x" in vit and MEASURED_ON in text
    assert not any("mae" in line for line in lines if line.startswith(("  Swin", "  ConvNeXt", "  ResNet")))
    every = CliRunner().invoke(main, ["list", "--backbones", "--all"]).output.splitlines()
    assert len(every) > 1000 and "  convnext_atto" in every


def test_list_backbones_pattern_filters_aliases_families_and_names():
    lines = CliRunner().invoke(main, ["list", "--backbones", "swin*", "--all"]).output.splitlines()
    assert "  swin_t         swin_tiny_patch4_window7_224" in lines and "  swin_tiny_patch4_window7_224" in lines
    assert not any(line.startswith(("  ViT", "  ConvNeXt", "  vit_", "  convnext")) for line in lines)
