"""Reading a `--config` file safely: YAML (a safe loader) or JSON, refused in one line when it is missing, malformed,
oversized or built to exhaust memory or the stack."""

import json
from pathlib import Path

import yaml

from ..engine.training.run_folder import note_input
from ..errors import ParameterError

# A config holds a few dozen fields, some of them lists or mappings a few levels deep (a run's config.json is ~3 KB):
# these limits refuse a file or a --set value built to exhaust memory or the stack (YAML's "billion laughs", a
# 100,000-deep list) before anything expands it or recurses into it.
MAX_CONFIG_BYTES = 1_000_000
MAX_DEPTH = 32  # lists and mappings inside one another
MAX_VALUES = 100_000  # values once YAML's aliases (*name) and merges (<<) are expanded


class ValueLimitError(ValueError):
    """A config value past one of the limits above; its text says which, for the caller's one line."""


class BoundedLoader(yaml.SafeLoader):
    """yaml's safe loader (no python/ tags), refusing while it composes a value nested deeper than MAX_DEPTH, and,
    before constructing anything, one whose aliases expand to more than MAX_VALUES values."""

    def __init__(self, stream):
        super().__init__(stream)
        self.level = 0

    def compose_node(self, parent, index):
        self.level += 1  # composing recurses once per level: refuse before the stack runs out
        try:
            if self.level > MAX_DEPTH:
                raise ValueLimitError(f"nests deeper than {MAX_DEPTH} levels (the limit)")
            return super().compose_node(parent, index)
        finally:
            self.level -= 1

    def compose_document(self):
        node = super().compose_document()
        measure(node, yaml_children)
        return node


def yaml_children(node) -> list | None:
    if isinstance(node, yaml.SequenceNode):
        return node.value
    if isinstance(node, yaml.MappingNode):
        return [part for pair in node.value for part in pair]
    return None


def json_children(value) -> list | None:
    if isinstance(value, list):
        return value
    return list(value.values()) if isinstance(value, dict) else None


def measure(root, children) -> None:
    """Raise ValueLimitError when `root` (YAML nodes, or what json parsed) expands to more than MAX_VALUES values, nests
    deeper than MAX_DEPTH, or holds itself. An aliased node is measured once (memo by id), so a billion laughs costs
    its few dozen nodes, and the recursion stops at MAX_DEPTH."""
    sizes: dict[int, tuple[int, int] | None] = {}  # id -> (values, depth); None while being measured

    def walk(node, level: int) -> tuple[int, int]:
        inner = children(node)
        if inner is None:
            return 1, 0
        if id(node) in sizes:
            if sizes[id(node)] is None:
                raise ValueLimitError("holds itself (a YAML alias inside its own anchor)")
            count, depth = sizes[id(node)]
        else:
            if level >= MAX_DEPTH:
                raise ValueLimitError(f"nests deeper than {MAX_DEPTH} levels (the limit)")
            sizes[id(node)] = None
            count, depth = 1, 0
            for child in inner:
                child_count, child_depth = walk(child, level + 1)
                count, depth = count + child_count, max(depth, child_depth + 1)
                if count > MAX_VALUES:
                    raise ValueLimitError(f"expands to more than {MAX_VALUES:,} values (the limit; YAML aliases?)")
            sizes[id(node)] = count, depth
        if level + depth > MAX_DEPTH:
            raise ValueLimitError(f"nests deeper than {MAX_DEPTH} levels (the limit)")
        return count, depth

    walk(root, 0)


def load_yaml(text: str):
    """`yaml.safe_load` within the limits above (ValueLimitError past one)."""
    return yaml.load(text, Loader=BoundedLoader)  # noqa: S506 - BoundedLoader is a SafeLoader


def load_json(text: str):
    """`json.loads` within the limits above (ValueLimitError past one)."""
    try:
        value = json.loads(text)
    except RecursionError:
        raise ValueLimitError(f"nests deeper than {MAX_DEPTH} levels (the limit)") from None
    measure(value, json_children)
    return value


def read_config_file(path: str) -> dict:
    """The mapping in a .yaml / .yml / .json file; one clear line for a missing, malformed or oversized file (see
    the limits above)."""
    file = Path(path).expanduser()
    if not file.is_file():
        raise ParameterError(
            f"config file '{path}' does not exist; give a .yaml or .json file (a run's own OUT/config.json works)."
        )
    size = file.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise ParameterError(
            f"config file '{path}' is {size:,} bytes, more than a config may be ({MAX_CONFIG_BYTES:,}, the limit)."
        )
    note_input(file)  # no output of the command may replace it (--out FOLDER --force with FOLDER/config.json)
    if file.suffix.lower() not in (".yaml", ".yml", ".json"):  # a TOML or INI file would read as one YAML string
        raise ParameterError(f"config file '{path}' is not YAML or JSON; give a .yaml, .yml or .json file.")
    try:
        text = file.read_text(encoding="utf-8-sig")  # YAML and JSON are UTF-8, whatever the locale (a BOM allowed)
        values = load_json(text) if file.suffix == ".json" else load_yaml(text)
    except ValueLimitError as err:
        raise ParameterError(f"config file '{path}' is refused: it {err}.") from None
    except UnicodeDecodeError as err:
        raise ParameterError(
            f"config file '{path}' is not UTF-8 text (at byte offset {err.start}); save it as UTF-8."
        ) from None
    except json.JSONDecodeError as err:
        raise ParameterError(f"config file '{path}' cannot be parsed at line {err.lineno}: {err.msg}.") from None
    except yaml.YAMLError as err:
        where = getattr(err, "problem_mark", None)
        line = f" at line {where.line + 1}" if where else ""
        raise ParameterError(f"config file '{path}' cannot be parsed{line}: {getattr(err, 'problem', err)}.") from None
    if values is None:
        return {}
    if not isinstance(values, dict):
        raise ParameterError(
            f"config file '{path}' must hold a mapping of field: value, not a {type(values).__name__}."
        )
    return values
