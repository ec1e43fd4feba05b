"""The study scripts as a reader runs them: a cached number is read back only for what it measured, the documented
report commands print what the results pages quote, and a user's mistake ends in one line, not a traceback."""

import importlib.util
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STUDIES = ROOT / "studies"
FINETUNE_CELLS = STUDIES / "finetune-peak" / "cells"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture
def sensitivity(monkeypatch, tmp_path):
    """finetune_sensitivity.py with its default data in tmp_path (as ../shared would be) and a fine-tune that
    counts its calls instead of training."""
    module = load(STUDIES / "finetune-peak" / "finetune_sensitivity.py", "study_finetune_sensitivity")
    data = tmp_path / "cifar10-subset"
    data.mkdir()
    monkeypatch.setattr(module, "SHARED_DATA", data)
    module.calls = []

    def finetune(checkpoint, changes, args):
        module.calls.append(checkpoint)
        return {"final": 12.5, "best": 13.5, "top1": [12.5]}

    monkeypatch.setattr(module, "finetune", finetune)
    return module


@pytest.fixture
def length():
    return load(STUDIES / "length" / "length.py", "study_length")


@pytest.fixture
def representation(monkeypatch):
    monkeypatch.syspath_prepend(str(STUDIES / "representation"))  # its `arms`
    return load(STUDIES / "representation" / "representation.py", "study_representation")


def one_line_exit(run, capsys, code: int = 1) -> str:
    with pytest.raises(SystemExit) as stopped:
        run()
    message = str(stopped.value.code) if isinstance(stopped.value.code, str) else capsys.readouterr().err
    assert stopped.value.code in (code, message), message
    assert len(message.strip().splitlines()) == 1, message
    return message


def test_finetune_sensitivity_refuses_a_missing_checkpoint_without_printing_cached_numbers(sensitivity, capsys):
    """The README's command with no checkpoint there printed the committed 49.07 and 47.20."""
    argv = ["--model", "energy-544=runs/energy/checkpoint.pt", "--variant", "small"]
    message = one_line_exit(
        lambda: sensitivity.main([*argv, "--variant", "lr-half=base_lr=2e-3", "--seed", "2"]), capsys
    )
    assert "no checkpoint runs/energy/checkpoint.pt" in message and "--cached-only" in message
    assert "49.07" not in capsys.readouterr().out
    assert sensitivity.calls == []


def test_finetune_sensitivity_reads_a_cell_back_only_for_the_same_checkpoint_data_and_changes(
    sensitivity, tmp_path, capsys
):
    first, copy, other = tmp_path / "a.pt", tmp_path / "copy.pt", tmp_path / "b.pt"
    first.write_bytes(b"weights a")
    copy.write_bytes(b"weights a")
    other.write_bytes(b"weights b")
    out = ["--out", str(tmp_path / "cells"), "--data", "sample", "--seed", "2"]

    def run(checkpoint, *more):
        sensitivity.main(["--model", f"m={checkpoint}", "--variant", "small", *out, *more])

    run(first)
    run(copy)  # the same content elsewhere: the cell, not a second fine-tune
    assert sensitivity.calls == [first]
    cell = json.loads((tmp_path / "cells" / "m" / "small" / "seed2.json").read_text())
    assert cell["data"] == "sample" and cell["changes"] == {} and cell["seed"] == 2 and cell["final"] == 12.5
    capsys.readouterr()
    assert "SHA-256" in one_line_exit(lambda: run(other), capsys)
    assert '"sample", asked "synthetic"' in one_line_exit(lambda: run(first, "--data", "synthetic"), capsys)
    changed = ["--model", f"m={first}", "--variant", "small=base_lr=1e-3", *out]
    assert "changes {}" in one_line_exit(lambda: sensitivity.main(changed), capsys)
    assert sensitivity.calls == [first]


def test_finetune_sensitivity_cached_only_prints_the_committed_cells(sensitivity, capsys):
    sensitivity.main(["--cached-only", "--model", "energy-544", "--variant", "small", "--seed", "2"])
    out = capsys.readouterr().out
    assert "| energy-544 | small | - | 2 | 49.07 | 49.36 |" in out
    assert len(out.strip().splitlines()) == 3  # the header, its rule and the one cell asked for
    sensitivity.main(["--cached-only"])
    rows = [line for line in capsys.readouterr().out.splitlines() if line.startswith("| ") and "---" not in line]
    assert len(rows) - 1 == len(list(FINETUNE_CELLS.glob("*/*/seed*.json")))
    wrong = ["--cached-only", "--model", "energy-544", "--variant", "lr-half=base_lr=1e-3", "--seed", "2"]
    assert 'changes {"base_lr": 0.002}' in one_line_exit(lambda: sensitivity.main(wrong), capsys)


def test_finetune_sensitivity_reads_a_committed_cell_only_for_the_checkpoint_it_records(
    sensitivity, tmp_path, monkeypatch, capsys
):
    """The committed cells record their checkpoint by path alone: another checkpoint under their label is refused,
    the path they record is read back."""
    shutil.copytree(FINETUNE_CELLS / "energy-544", tmp_path / "cells" / "energy-544")
    monkeypatch.chdir(tmp_path)
    recorded = Path("runs/rerun/vit_tiny/energy-centred-sincos/seed2/m544/checkpoint.pt")  # lr-half's, relative
    recorded.parent.mkdir(parents=True)
    recorded.write_bytes(b"any weights")
    elsewhere = tmp_path / "mine.pt"
    elsewhere.write_bytes(b"any weights")
    out = ["--variant", "lr-half=base_lr=2e-3", "--seed", "2", "--out", "cells"]
    message = one_line_exit(lambda: sensitivity.main(["--model", f"energy-544={elsewhere}", *out]), capsys)
    assert f"checkpoint {recorded}, asked {elsewhere}" in message
    sensitivity.main(["--model", f"energy-544={recorded}", *out])
    assert "| energy-544 | lr-half | base_lr=0.002 | 2 | 47.20 |" in capsys.readouterr().out
    assert sensitivity.calls == []


def test_length_report_prints_every_cached_seed_as_the_page(length, capsys):
    """The documented `--cached-only` command printed seed 0 alone (51.3) where the page quotes three seeds."""
    length.main(["--cached-only", "--backbones", "vit_tiny", "--arms", "alpha-lr1", "--steps", "567"])
    out = capsys.readouterr().out
    assert "seeds 3" in out and "fine-tuned 49.0 +- 2.7" in out
    length.main(["--cached-only", "--backbones", "vit_tiny", "--arms", "alpha-lr1", "--steps", "567", "--seeds", "0"])
    assert "seeds 1" in capsys.readouterr().out


def measured_on_sample(folder: Path) -> None:
    folder.mkdir(parents=True)
    (folder / "cell.json").write_text(json.dumps({"settings": {"data": "sample"}, "points": {}, "finetunes": {}}))


def test_length_refuses_a_cell_measured_otherwise_in_one_line(length, tmp_path, capsys):
    measured_on_sample(tmp_path / "convnext_atto" / "default-63" / "seed0")
    argv = ["--backbones", "convnext_atto", "--arms", "default", "--steps", "63", "--data", "synthetic"]
    message = one_line_exit(lambda: length.main([*argv, "--out", str(tmp_path)]), capsys)
    assert "measured with other settings" in message and "another --out" in message
    assert "--force" not in message


def test_length_refuses_a_missing_default_data_folder(length, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(length, "DATA", tmp_path / "cifar10-subset")
    argv = ["--backbones", "convnext_atto", "--arms", "default", "--steps", "63", "--out", str(tmp_path / "cells")]
    message = one_line_exit(lambda: length.main(argv), capsys, code=2)
    assert "is missing; give --data" in message
    assert not (tmp_path / "cells").exists()


def test_length_ends_a_users_mistake_in_one_line(tmp_path):
    script = STUDIES / "length" / "length.py"
    argv = ["--backbones", "convnext_atto", "--arms", "default", "--steps", "63", "--finetune-epochs", "0"]
    argv += ["--data", str(tmp_path / "none"), "--out", str(tmp_path / "cells")]
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "Traceback" not in done.stderr
    assert done.stderr.startswith("length.py: data path")


def test_representation_refuses_a_cell_measured_otherwise_in_one_line(representation, tmp_path, capsys):
    measured_on_sample(tmp_path / "test_convnext" / "energy" / "seed0")
    argv = ["--backbones", "test_convnext", "--methods", "energy", "--steps", "3", "--seeds", "0"]
    argv += ["--finetune-epochs", "0", "--data", "synthetic", "--out", str(tmp_path)]
    message = one_line_exit(lambda: representation.main(argv), capsys)
    assert "measured with other settings" in message and "another --out" in message
    assert "--force" not in message


def test_representation_never_takes_other_data_for_a_missing_default(representation, tmp_path, monkeypatch, capsys):
    """Without ../shared it fell back to the sample data and --cached-only stamped the summary with it."""
    monkeypatch.setattr(representation, "SHARED_DATA", tmp_path / "cifar10-subset")
    argv = ["--cached-only", "--out", str(tmp_path / "cells")]
    message = one_line_exit(lambda: representation.main(argv), capsys, code=2)
    assert "is missing; give --data" in message
    assert not (tmp_path / "cells" / "representation.json").exists()


@pytest.mark.slow  # the study's process pool: spawned cells import torch again
def test_representation_ends_a_cells_error_in_one_line(tmp_path):
    script = STUDIES / "representation" / "representation.py"
    argv = ["--backbones", "test_convnext", "--methods", "energy", "--steps", "3", "--seeds", "0"]
    argv += ["--finetune-epochs", "0", "--data", str(tmp_path / "none"), "--out", str(tmp_path / "cells")]
    done = subprocess.run([sys.executable, str(script), *argv], capture_output=True, text=True, timeout=300)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [done.stderr.strip()] and "Traceback" not in done.stderr
    assert done.stderr.startswith("representation.py: data path")


def test_length_report_answers_help_without_drawing(tmp_path, monkeypatch, capsys):
    report = load(STUDIES / "length" / "report.py", "study_length_report")
    monkeypatch.setattr(report, "PLOT", tmp_path / "length.png")
    with pytest.raises(SystemExit) as stopped:
        report.main(["--help"])
    assert stopped.value.code == 0 and "usage:" in capsys.readouterr().out
    assert not (tmp_path / "length.png").exists()
    report.main([])  # no arguments: the plot, as before
    assert (tmp_path / "length.png").stat().st_size > 0


def test_studies_index_gives_each_study_its_own_results_page():
    row = r"^\| \[(\S+)\]\((\S+)/README\.md\) \|.*\| \[.*\]\(\.\./(docs/\S+?\.md)(?:#\S+)?\) \|$"
    rows = re.findall(row, (STUDIES / "README.md").read_text(), re.M)
    assert len(rows) == len([p for p in STUDIES.iterdir() if (p / "README.md").is_file()])
    for _, folder, page in rows:
        own = re.search(r"\(\.\./\.\./(docs/\S+?\.md)\)", (STUDIES / folder / "README.md").read_text())
        assert own and own.group(1) == page, f"studies/README.md gives {folder} {page}"
