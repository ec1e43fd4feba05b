"""What tests/test_docs.py reads out of the Markdown docs: the fenced code blocks of each page, the `pretexts`
command lines of its shell blocks, and the check of one such line against the real click parser."""

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

import click

ROOT = Path(__file__).resolve().parent.parent
SKIP_MARK = "<!-- docs-test: skip -->"  # the last line before a ```python block that must not run
SHELL = ("bash", "sh", "shell")
FENCE = re.compile(r"^(?P<indent>\s*)(?P<fence>`{3,}|~{3,})\s*(?P<info>[^`]*)$")
SNIPPET = re.compile(r"""^\s*--8<--\s+["']([^"']+)["']\s*$""")  # pymdownx.snippets: a repository file, whole
# the start of a shell line that may run pretexts; pretexts_args decides
CANDIDATE = re.compile(r"^(?:[A-Za-z_]\w*=\S*\s+)*(?:pretexts(?:\s|$)|python3? +-m +pretexts(?:\s|$)|torchrun\s)")
ENV_ASSIGNMENT = re.compile(r"[A-Za-z_]\w*=.*")
WHICH_PRETEXTS = "$(which pretexts)"
SCRIPT = "<the pretexts script>"  # stands for $(which pretexts) while the line is split into words
ELISION = "..."  # `pretexts train ... --compile`: the options that matter, the rest elided
SEPARATORS = ("|", "||", "&&", ";", "&")  # the pretexts command ends there (`pretexts list | head`)
REDIRECTION = re.compile(r"(\d*|&)(>>?|<)(.*)")  # `2> train.log`, `>log`, `2>&1`: the shell's, not pretexts'


@dataclass(frozen=True)
class Block:
    """One fenced code block: its page (relative to the repository), the line of its opening fence, its
    language, its text (dedented to the fence) and whether the line before it says not to run it."""

    page: str
    line: int
    language: str
    source: str
    skip: bool


def doc_pages(root: Path = ROOT) -> list[Path]:
    """README.md, every page under docs/, and the repository files those pages include whole (--8<--)."""
    pages = [root / "README.md", *sorted((root / "docs").rglob("*.md"))]
    included = []
    for page in pages:
        for line in page.read_text(encoding="utf-8").splitlines():
            match = SNIPPET.match(line)
            if match and (root / match[1]).suffix == ".md" and (root / match[1]).is_file():
                included.append(root / match[1])
    return [page for page in dict.fromkeys([*pages, *included]) if page.is_file()]


def page_name(page: Path, root: Path = ROOT) -> str:
    return page.resolve().relative_to(root).as_posix()


def read_blocks(text: str, page: str) -> list[Block]:
    """The fenced blocks of a Markdown text, also those indented in a list item."""
    blocks, lines, number, previous = [], text.splitlines(), 0, ""
    while number < len(lines):
        opening = FENCE.match(lines[number])
        number += 1
        if not opening:
            previous = lines[number - 1].strip() or previous
            continue
        start, indent, fence = number, len(opening["indent"]), opening["fence"]
        words = opening["info"].strip().strip("{}").split()
        closing = re.compile(rf"\s*{re.escape(fence[0])}{{{len(fence)},}}\s*")
        body = []
        while number < len(lines) and not closing.fullmatch(lines[number]):
            line = lines[number]
            body.append(line[indent:] if not line[:indent].strip() else line.lstrip())
            number += 1
        number += 1  # past the closing fence
        language = words[0].lstrip(".").lower() if words else ""
        blocks.append(Block(page, start, language, "\n".join(body) + "\n", previous == SKIP_MARK))
        previous = ""
    return blocks


def indented_command_lines(text: str) -> list[int]:
    """Line numbers of `pretexts` commands in an indented (unfenced) code block, which no test reads."""
    fenced, numbers = set(), []
    for block in read_blocks(text, ""):
        fenced.update(range(block.line, block.line + block.source.count("\n") + 2))
    for number, line in enumerate(text.splitlines(), start=1):
        if number not in fenced and re.match(r"( {4,}|\t)\S", line) and is_pretexts_line(line.strip()):
            numbers.append(number)
    return numbers


def page_blocks(page: Path, languages: tuple[str, ...]) -> list[Block]:
    blocks = read_blocks(page.read_text(encoding="utf-8"), page_name(page))
    return [block for block in blocks if block.language in languages]


def shell_lines(block: Block) -> list[tuple[int, str]]:
    """(line number in the page, line) of a shell block, a line ending in a backslash joined with the next."""
    joined, start, pending = [], None, ""
    for offset, line in enumerate(block.source.splitlines(), start=block.line + 1):
        start = offset if not pending else start
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        joined.append((start, (pending + line).strip()))
        pending = ""
    if pending:
        joined.append((start, pending.strip()))
    return joined


def is_pretexts_line(line: str) -> bool:
    """Whether the line runs pretexts (a line that cannot be split into words counts, so that its test says why)."""
    if not CANDIDATE.match(line):
        return False
    try:
        return pretexts_args(line) is not None
    except ValueError:
        return True


def pretexts_args(line: str) -> list[str] | None:
    """The arguments that `pretexts` gets from a shell line, or None when the line does not run it:
    `pretexts ARGS`, `python -m pretexts ARGS`, `torchrun [its options] -m pretexts ARGS` and
    `torchrun [its options] $(which pretexts) ARGS`, after any VAR=value prefixes, with shell quoting, a trailing
    `# comment`, redirections and a following `| ...` or `&& ...` handled as the shell does. A bare `...` (elided
    options) is dropped."""
    words = shlex.split(line.replace(WHICH_PRETEXTS, shlex.quote(SCRIPT)), comments=True)
    while words and ENV_ASSIGNMENT.fullmatch(words[0]):
        words.pop(0)
    if not words:
        return None
    if words[0] == "pretexts":
        rest = words[1:]
    elif re.fullmatch(r"python3?", words[0]) and words[1:3] == ["-m", "pretexts"]:
        rest = words[3:]
    elif words[0] == "torchrun":
        starts = [i for i, word in enumerate(words) if word == SCRIPT or word == "pretexts" and words[i - 1] == "-m"]
        if not starts:
            return None  # torchrun of a script
        rest = words[starts[0] + 1 :]
    else:
        return None
    rest = rest[: next((i for i, word in enumerate(rest) if word in SEPARATORS), len(rest))]
    args, target = [], False
    for word in rest:
        redirection = REDIRECTION.fullmatch(word)
        if not target and not redirection and word != ELISION:
            args.append(word)
        target = bool(redirection) and not redirection[3]  # `2>` alone: the next word is its file
    return args


def parse_command(args: list[str]) -> click.Context | None:
    """Parses `pretexts ARGS` as the shell would run it, with the real click group, without running anything:
    the subcommand must exist and every option and value must parse (click.UsageError, with the reason,
    otherwise). Returns the subcommand's context (None for `pretexts` alone or `pretexts --version`).
    --help is left out (it would print and stop the parse); the selected method adds train's options."""
    from pretexts.cli import main

    args = [arg for arg in args if arg not in ("--help", "-h")]
    if not args:
        return None  # `pretexts` alone shows the help
    try:
        group = main.make_context("pretexts", list(args), resilient_parsing=False)
    except click.exceptions.Exit as stop:  # --version prints the version and stops, as it does in the shell
        if stop.exit_code != 0:
            raise
        return None
    rest = [*(group._protected_args if hasattr(group, "_protected_args") else group.protected_args), *group.args]
    if not rest:
        raise click.UsageError("Missing command.", ctx=group)
    name, command, sub_args = main.resolve_command(group, rest)
    return command.make_context(name, sub_args, parent=group, resilient_parsing=False)


def shown(value) -> str:
    return format(value, "g") if isinstance(value, float) else str(value)


def check_list_spelling(ctx: click.Context | None, args: list[str]) -> None:
    """click.UsageError where a parsed `pretexts` command spells a multi-value option another way than its --help
    documents, which the parser alone lets through: a list option of the command's `list_options` (compare's
    `--seeds 0 1 2`, its values after one flag) given more than once, or a value holding a comma for any
    multi-value option but a KEY=VALUE one (`--probe linear,knn` is one probe named 'linear,knn'; the KEY=VALUE
    options' values may hold commas of their own: `--task-arg tasks=a,b`). Extra bare words after a repeatable
    option (`--probe linear knn`) already fail to parse."""
    if ctx is None:
        return
    spaced = getattr(ctx.command, "list_options", ())
    for param in ctx.command.get_params(ctx):
        if not isinstance(param, click.Option) or not param.multiple:
            continue
        flag, values = param.opts[0], tuple(ctx.params.get(param.name) or ())
        parts = [part for value in values for part in str(value).split(",") if part]
        if flag in spaced:
            right = f"{flag} {' '.join(map(shown, parts))}"
            uses = sum(arg == flag or arg.startswith(flag + "=") for arg in args)
            if uses > 1:
                raise click.UsageError(f"{flag} is given {uses} times; its --help documents `{right}`.", ctx=ctx)
        else:
            right = " ".join(f"{flag} {part}" for part in parts)
        if param.metavar != "KEY=VALUE" and any("," in str(value) for value in values):
            raise click.UsageError(f"{flag} is given a comma-separated value; its --help documents `{right}`.", ctx=ctx)
