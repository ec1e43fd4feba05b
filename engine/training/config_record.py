"""What a run saves of its config as OUT/config.json, and how a saved config reads back as the run was given it.

config.json holds every setting as the run used it (what a recipe filled in and `auto` resolved to), less the
per-invocation options (`--force`, `--resume`: what to do with --out this time, never a setting to reuse), and
under `derived` the fields that were derived rather than given, each with what it was asked as (None: not given)
and the value it took. A `--config` of it puts those back as asked, so the recipe, `auto` and the method derive
them again from the file's given values and the new command line's: the same inputs give the same run, a changed
recipe, backbone or method its own values. A value edited in the file counts as given, as does a field set on the
config after it was derived, and a file without `derived` (an older config.json, a hand-written YAML) is taken as
given.
Torch-free: the CLI reads config files with it.
"""

import copy
from dataclasses import asdict, fields

DERIVED = "derived"
RECIPE_APPLIED = "recipe_applied"  # beside the fields, as DERIVED: the recipe whose values fill them
PER_INVOCATION = ("force", "resume")
AUTO = "auto"


def note_derived(cfg, name: str, asked=None) -> None:
    """Note on `cfg` (beside its fields, not one of them) that `name`'s value was derived, asked as `asked`
    (None: not given), with the value the field holds now; a mapping `asked` notes a mapping field's keys
    (method_args). A note holds while its field keeps that value: one set since (`cfg.base_lr = 5e-4` after the
    recipe filled it) is given, and `derived_of` leaves its note out. A field's first note that holds stands: the
    recipe filled `schedule` before `auto` resolved it."""
    notes, value = vars(cfg).setdefault(DERIVED, {}), getattr(cfg, name)
    if isinstance(asked, dict):
        inner = value if isinstance(value, dict) else {}
        held = {k: n for k, n in notes.get(name, {}).items() if holds(n, inner.get(k))}
        notes[name] = {**{k: (a, copy.deepcopy(inner.get(k))) for k, a in asked.items()}, **held}
    elif name not in notes or not holds(notes[name], value):
        notes[name] = (asked, copy.deepcopy(value))


def holds(note: tuple, value) -> bool:
    """The noted value is still the field's (or key's)."""
    return note[1] == value


def derived_of(cfg) -> dict:
    """What `note_derived` noted on `cfg` and still holds: field -> what it was asked as (a mapping field's keys,
    key -> asked), as config.json and checkpoints record it."""
    derived = {}
    for name, note in vars(cfg).get(DERIVED, {}).items():
        value = getattr(cfg, name)
        if isinstance(note, dict):
            keys = {k: n[0] for k, n in note.items() if isinstance(value, dict) and k in value and holds(n, value[k])}
            if keys:
                derived[name] = keys
        elif holds(note, value):
            derived[name] = note[0]
    return derived


def left_open(value) -> bool:
    """A value that asks the run to derive it: not given (None), or `auto`."""
    return value is None or value == AUTO


def note_resolved(record, asked) -> None:
    """Note on `record`, the run's copy of the config `asked` with its values resolved, what `asked` noted and each
    field `asked` left open that now holds another value; a mapping field (method_args) key by key, a key not
    given counting as derived whatever its value."""
    for name, value in derived_of(asked).items():
        note_derived(record, name, value)
    for f in fields(record):
        before, now = getattr(asked, f.name), getattr(record, f.name)
        if isinstance(now, dict) and isinstance(before, dict):
            keys = {k: before.get(k) for k in now if k not in before or before[k] == AUTO != now[k]}
            if keys:
                note_derived(record, f.name, keys)
        elif left_open(before) and before != now:
            note_derived(record, f.name, before)


def carry_derived(record, ckpt: dict) -> None:
    """A resumed run's record keeps what its checkpoint noted as derived, for each field it kept as saved."""
    saved, now = ckpt.get("config") or {}, asdict(record)
    for name, asked in (ckpt.get(DERIVED) or {}).items():
        if isinstance(asked, dict):
            before, after = saved.get(name) or {}, now.get(name) or {}
            kept = {k: a for k, a in asked.items() if before.get(k) == after.get(k)}
            if kept:
                note_derived(record, name, kept)
        elif saved.get(name) == now.get(name):
            note_derived(record, name, asked)


def saved_settings(cfg) -> dict:
    """config.json's contents: every field but the per-invocation ones, and under `DERIVED` each derived field (a
    mapping field's keys one by one) as {"asked": what it was asked as, "was": the value the run used}."""
    values = {k: v for k, v in asdict(cfg).items() if k not in PER_INVOCATION}
    derived = {}
    for name, asked in derived_of(cfg).items():
        if isinstance(asked, dict):
            derived[name] = {k: {"asked": a, "was": values[name].get(k)} for k, a in asked.items()}
        else:
            derived[name] = {"asked": asked, "was": values.get(name)}
    return {**values, DERIVED: derived}


def given_values(values: dict) -> tuple[dict, dict]:
    """(values, again): a saved config's values with each field its `DERIVED` record names put back as it was asked
    (None: removed, so the default, the recipe or the method fills it in again), a mapping field key by key, unless
    the file now holds another value than the run used (an edit: given); and what was put back, as
    `note_derived` notes it. The record itself is no setting and is removed."""
    record = values.get(DERIVED)
    values, again = {k: v for k, v in values.items() if k != DERIVED}, {}
    for name, entry in (record if isinstance(record, dict) else {}).items():
        if isinstance(values.get(name), dict) and isinstance(entry, dict):  # method_args
            inner = dict(values[name])
            keys = {k: e["asked"] for k, e in entry.items() if unchanged(e, inner, k)}
            kept = {k: v for k, v in inner.items() if k not in keys}
            values[name] = {**kept, **{k: a for k, a in keys.items() if a is not None}}
            again[name] = keys
        elif unchanged(entry, values, name):
            again[name] = values[name] = entry["asked"]
            if entry["asked"] is None:
                del values[name]
    return values, {k: v for k, v in again.items() if v != {}}


def unchanged(entry, values: dict, name: str) -> bool:
    """`entry` is a derived record of `name` whose value `values` still holds as the run used it."""
    return isinstance(entry, dict) and "asked" in entry and name in values and values[name] == entry.get("was")
