"""The docs cannot drift: every ```python block of README.md and docs/ runs (per page, in order, in one namespace,
in a fresh folder), every `pretexts` command of their shell blocks parses with the real click group, and the
README's quick start runs end to end at tiny size."""

import fnmatch
import re
import shlex
import traceback
from pathlib import Path

import click
import pytest
from cli_runs import one_torch_thread  # noqa: F401 (autouse: one torch thread for tiny models)
from click.testing import CliRunner
from docs_blocks import (
    ROOT,
    SHELL,
    Block,
    check_list_spelling,
    doc_pages,
    indented_command_lines,
    is_pretexts_line,
    page_blocks,
    page_name,
    parse_command,
    pretexts_args,
    read_blocks,
    shell_lines,
)

from pretexts.cli import main
from pretexts.registry import METHODS, PROBES, TASKS

PAGES = doc_pages()


def run_python_blocks(blocks: list[Block], namespace: dict) -> None:
    """Runs the blocks in order in `namespace`; a failure names its page and the line in it."""
    for block in blocks:
        if block.skip:
            continue
        # padded so that a traceback's line numbers are the page's own
        code = compile("\n" * block.line + block.source, str(ROOT / block.page), "exec")
        try:
            exec(code, namespace)
            continue
        except (Exception, SystemExit):
            problem = traceback.format_exc()
        pytest.fail(f"{block.page}: the python block at line {block.line} fails:\n{problem}", pytrace=False)


@pytest.fixture
def fresh_registries():
    """Tasks, methods and probes a page registers (defined in its `__main__` namespace) are removed after it, so a
    page run twice (README.md, then its quick start) registers them again rather than clashing."""
    yield
    for registry in (TASKS, METHODS, PROBES):
        for name, entry in list(registry.table.items()):
            if getattr(entry, "__module__", None) == "__main__":
                registry.table.pop(name)


PYTHON_PAGES = [page for page in PAGES if page_blocks(page, ("python",))]


@pytest.mark.parametrize("page", PYTHON_PAGES, ids=[page_name(page) for page in PYTHON_PAGES])
def test_python_blocks_run(page, tmp_path, monkeypatch, fresh_registries):
    monkeypatch.chdir(tmp_path)
    run_python_blocks(page_blocks(page, ("python",)), {"__name__": "__main__"})


# the docs and the studies' READMEs, whose commands a reader runs too
COMMAND_PAGES = [*PAGES, *sorted((ROOT / "studies").rglob("README.md"))]
COMMANDS = [
    (f"{block.page}:{number}", line)
    for page in COMMAND_PAGES
    for block in page_blocks(page, SHELL)
    for number, line in shell_lines(block)
    if is_pretexts_line(line)
]


def check_command_line(line: str) -> click.Context | None:
    """The line's pretexts arguments parsed by the real click group, each multi-value option spelt as its --help
    documents; click.UsageError (or ValueError for a line the shell cannot split) says what is wrong."""
    args = pretexts_args(line)
    ctx = parse_command(args)
    check_list_spelling(ctx, args)
    return ctx


@pytest.mark.parametrize("line", [line for _, line in COMMANDS], ids=[where for where, _ in COMMANDS])
def test_command_parses(line):
    try:
        check_command_line(line)
        return
    except click.UsageError as err:
        problem = err.format_message()
    except ValueError as err:
        problem = f"the shell cannot split it into words ({err})"
    pytest.fail(f"`{line}` does not parse as its --help documents: {problem}", pytrace=False)


# the benchmark and study scripts the docs and the studies' READMEs tell a reader to run
SCRIPT_COMMANDS = [
    (f"{block.page}:{number}", words)
    for page in COMMAND_PAGES
    for block in page_blocks(page, SHELL)
    for number, line in shell_lines(block)
    for words in [shlex.split(line, comments=True)]
    if any(word.startswith(("benchmarks/", "studies/")) and word.endswith(".py") for word in words)
]


@pytest.mark.parametrize("words", [w for _, w in SCRIPT_COMMANDS], ids=[where for where, _ in SCRIPT_COMMANDS])
def test_script_command_names_a_script_and_its_options(words):
    """A reproduce command names a script that exists, and every --option it passes is one the script declares."""
    script = next(w for w in words if w.startswith(("benchmarks/", "studies/")) and w.endswith(".py"))
    assert (ROOT / script).is_file(), f"{script} does not exist"
    source = (ROOT / script).read_text(encoding="utf-8")
    for module in re.findall(r"^from (\w+) import", source, re.M):  # a sibling module's parser (pretrained_models)
        sibling = (ROOT / script).parent / f"{module}.py"
        source += sibling.read_text(encoding="utf-8") if sibling.is_file() else ""
    after = words[words.index(script) + 1 :]
    unknown = [w for w in after if w.startswith("--") and f'"{w.split("=")[0]}"' not in source]
    assert not unknown, f"{script} declares no {', '.join(unknown)}"


@pytest.mark.parametrize(
    "line, reason",
    [
        ("pretexts trian --epochs 1", "No such command"),
        ("pretexts train --epoch 1", "No such option"),
        ("pretexts train --amp bf32", "bf32"),
        ("pretexts train --epochs ten", "ten"),
        ("pretexts probe --checkpoint CKPT --probe linear extra", "unexpected extra argument"),
        ("pretexts export --out exported/", "checkpoint"),  # a required option left out
        ("pretexts train --method mae --steps 2", "No such option"),  # --steps is the energy method's, not MAE's
        ("pretexts train --task-arg scale=8 --set task_args={scale: 8}", "unexpected extra argument"),  # unquoted
        ("torchrun --nproc-per-node 2 -m pretexts train --batch-size many", "many"),
        ("python -m pretexts finetune --epochs 1.5", "1.5"),
        ("torchrun --nproc-per-node 2 $(which pretexts) probe --epochs x", "x"),
        # a multi-value option spelt another way than its --help documents, which click alone lets through
        ("pretexts compare --seeds 0 --seeds 1 --seeds 2", "--help documents `--seeds 0 1 2`"),
        ("pretexts compare --seeds 0 1 --seeds=2", "--help documents `--seeds 0 1 2`"),
        ("pretexts compare --tasks random-mask,colorization", "--help documents `--tasks random-mask colorization`"),
        ("pretexts compare --steps 100,250 --budget 2", "--help documents `--steps 100 250`"),
        ("pretexts probe --checkpoint CKPT --probe linear,knn", "--help documents `--probe linear --probe knn`"),
        ("pretexts compare --budget 2,5", "2,5"),  # not a number: click refuses it
        ("pretexts probe --checkpoint CKPT --knn-k 10,20", "10,20"),
        ("pretexts train --betas 0.9,0.95", "--betas"),  # two values, spaced
    ],
)
def test_command_check_refuses(line, reason):
    with pytest.raises(click.UsageError, match=re.escape(reason)):
        check_command_line(line)


def test_command_check_reads_every_form():
    lines = [
        "pretexts train --method mae --mask-ratio 0.75 --epochs 1  # MAE's own option, comment stripped",
        "CUDA_VISIBLE_DEVICES=0 python -m pretexts train --task colorization",
        "torchrun --nnodes 4 --nproc-per-node 8 --rdzv-id job42 -m pretexts finetune --checkpoint CKPT --epochs 2",
        "torchrun --nproc-per-node 2 $(which pretexts) probe --checkpoint 'runs/my run/checkpoint.pt'",
        "pretexts train ... --grad-mode finite-difference",
        "pretexts --version",
        "pretexts train --method mae --help",
        "pretexts train --epochs 3 --log-every 5 2> train.log >out.txt 2>&1 && pretexts list | head -3",
        "pretexts compare --tasks random-mask colorization --seeds 0 1 2 --steps 100 250 --set batch_size=8",
        "pretexts probe --checkpoint CKPT --probe linear --probe knn --knn-k 10 --knn-k 20 --probe-arg knn_k=5,7",
        "pretexts train --task mixed --task-arg tasks=random-mask,colorization --betas 0.9 0.95",
    ]
    parsed = [check_command_line(line) for line in lines]
    assert parsed[0].params["mask_ratio"] == 0.75 and parsed[0].params["epochs"] == 1
    assert parsed[1].info_name == "train" and parsed[2].params["epochs"] == 2
    assert parsed[3].params["checkpoint"] == "runs/my run/checkpoint.pt"
    assert parsed[4].params["grad_mode"] == "finite-difference" and parsed[5] is None
    assert parsed[6].params["method"] == "mae"  # parsed without showing the help
    assert parsed[7].params["epochs"] == 3 and parsed[7].params["log_every"] == 5
    assert parsed[8].params["tasks"] == ("random-mask", "colorization") and parsed[8].params["seeds"] == (0, 1, 2)
    assert parsed[8].params["steps"] == ("100", "250")  # each value of compare's lists after one flag
    assert parsed[9].params["probes"] == ("linear", "knn") and parsed[9].params["knn_k"] == (10, 20)
    assert parsed[10].params["betas"] == (0.9, 0.95)
    assert pretexts_args("torchrun --nproc-per-node 2 benchmarks/torchrun_scaling.py") is None
    assert not is_pretexts_line("pip install -e . && pretexts train")


def test_blocks_are_read_as_markdown_has_them():
    text = (
        "Intro\n\n<!-- docs-test: skip -->\n\n```python\nx = 1\n```\n\n- item\n\n  ```bash\n"
        "  pretexts train \\\n      --epochs 1   # short\n  echo done\n  ```\n```python\nif x:\n    y = 2\n```\n"
    )
    python, shell, last = read_blocks(text, "page.md")
    assert (python.line, python.language, python.source, python.skip) == (5, "python", "x = 1\n", True)
    assert [(number, " ".join(line.split())) for number, line in shell_lines(shell)] == [
        (12, "pretexts train --epochs 1 # short"),
        (14, "echo done"),
    ]
    assert (last.source, last.skip) == ("if x:\n    y = 2\n", False)


def test_commands_sit_in_checked_blocks():
    """A `pretexts` command in an untagged, ```text or indented code block is never checked: put it in a ```bash
    block (terminal output goes in ```text)."""
    unchecked = []
    for page in PAGES:
        text = page.read_text(encoding="utf-8")
        unchecked += [
            f"{page_name(page)}:{number}"
            for block in read_blocks(text, page_name(page))
            if block.language in ("", "text")
            for number, line in shell_lines(block)
            if is_pretexts_line(line)
        ]
        unchecked += [f"{page_name(page)}:{number}" for number in indented_command_lines(text)]
    assert not unchecked, "commands outside a ```bash block, so never checked:\n" + "\n".join(unchecked)


# Appended to each quick-start command so that it runs in seconds on a CPU; a later option wins in click, so these
# override the README's own values. One epoch of one step of 8 images, with no worker processes to start and no
# representation monitor, still writes every file a full run writes.
TINY = {
    "--version": [],
    "list": [],
    "train": ["--epochs", "1", "--batch-size", "8", "--max-steps-per-epoch", "1", "--monitor-every", "0"]
    + ["--eval-images", "8", "--figure-images", "2", "--workers", "0", "--device", "cpu"],
    "finetune": ["--epochs", "1", "--batch-size", "8", "--max-steps-per-epoch", "1", "--workers", "0"]
    + ["--device", "cpu"],
    "probe": ["--epochs", "1", "--workers", "0", "--device", "cpu"],
    "restore": ["--images", "2", "--device", "cpu"],
    "energy": ["--images", "8", "--workers", "0", "--device", "cpu"],
    "export": [],
}
# what each command must leave (file names, matched among the files it wrote or rewrote)
WRITES = {"train": ["checkpoint.pt"], "finetune": ["finetuned.pt"], "probe": ["results.json"], "restore": ["*.png"]}
QUICK_START_CLI = "## Quick start (command line)"
QUICK_START_PYTHON = "## Quick start (Python)"


def readme_section(heading: str) -> list[Block]:
    """The blocks of the README between `heading` and the next heading of its level; fails if it has none."""
    lines = (ROOT / "README.md").read_text(encoding="utf-8").splitlines()
    if heading not in lines:
        pytest.fail(f"README.md has no heading `{heading}`, which the quick-start test runs", pytrace=False)
    start = lines.index(heading) + 1
    level = heading.split()[0] + " "
    end = next((i for i in range(start, len(lines)) if lines[i].startswith(level)), len(lines))
    # blank lines keep each block's line number the page's own
    return read_blocks("\n" * start + "\n".join(lines[start:end]), "README.md")


def file_times(folder: Path) -> dict[Path, int]:
    return {path: path.stat().st_mtime_ns for path in folder.rglob("*") if path.is_file()}


def expected_files(name: str, ctx: click.Context) -> list[str]:
    if name == "export":  # a folder for timm (weights and config), or one weights file beside its json
        out = ctx.params["out"].rstrip("/")
        single = out.endswith((".safetensors", ".pth"))
        return [Path(out).name, Path(out).stem + ".json"] if single else ["model.safetensors", "config.json"]
    return WRITES.get(name, [])


def run_quick_start_command(line: str, folder: Path) -> None:
    ctx = check_command_line(line)
    name = ctx.info_name if ctx is not None else "--version"  # `pretexts --version` has no subcommand
    if name not in TINY:
        pytest.fail(f"the README's quick start runs `pretexts {name}`: declare its tiny options in TINY", pytrace=False)
    before = file_times(folder)
    result = CliRunner().invoke(main, [*pretexts_args(line), *TINY[name]])
    tiny = f" (with {' '.join(TINY[name])})" if TINY[name] else ""
    assert result.exit_code == 0, f"`{line}`{tiny} exited {result.exit_code}:\n{result.output}"
    written = [path.name for path, time in file_times(folder).items() if before.get(path) != time]
    for pattern in expected_files(name, ctx):
        assert fnmatch.filter(written, pattern), f"`{line}` wrote no {pattern}; it wrote {written}"


def test_readme_quick_start(tmp_path, monkeypatch, fresh_registries):
    """The README's quick start, as a reader runs it: its commands in order, then its Python, in one folder."""
    shell = [block for block in readme_section(QUICK_START_CLI) if block.language in SHELL]
    if not shell:
        pytest.fail(f"README.md's `{QUICK_START_CLI}` has no ```bash block", pytrace=False)
    commands = [line for _, line in shell_lines(shell[0]) if is_pretexts_line(line)]
    if not commands:
        pytest.fail(f"README.md's first ```bash block under `{QUICK_START_CLI}` has no pretexts command", pytrace=False)
    python = [block for block in readme_section(QUICK_START_PYTHON) if block.language == "python"]
    if not python:
        pytest.fail(f"README.md's `{QUICK_START_PYTHON}` has no ```python block", pytrace=False)
    monkeypatch.chdir(tmp_path)
    for line in commands:
        run_quick_start_command(line, tmp_path)
    run_python_blocks(python, {"__name__": "__main__"})
