"""`pretexts list`: what is registered (tasks, or --methods, --probes) with its parameters, and the plugins that
failed or were shadowed; or the backbones (--backbones)."""

import fnmatch
from dataclasses import dataclass

import click

from ..declared import Declared
from ..registry import METHODS, PROBES, TASKS, Registry
from . import main


@dataclass(frozen=True)
class Listing:
    """How one registry is listed: the option its parameters are given with, where an entry declares them,
    whether a plain listing shows them in full or only their defaults, and the order of the names."""

    registry: Registry
    option: str  # "--task-arg"
    params: str  # the attribute holding an entry's parameters (name -> pretexts.Param)
    full_params: bool = False  # a plain listing shows every parameter's line, not only their defaults
    sort: bool = False  # by name, not in the registry's order (built-ins first)


TASK_LISTING = Listing(TASKS, "--task-arg", "params", sort=True)
METHOD_LISTING = Listing(METHODS, "--method-arg", "method_params", full_params=True)
PROBE_LISTING = Listing(PROBES, "--probe-arg", "params")


@main.command("list")
@click.argument("pattern", default="*")
@click.option("-v", "--verbose", is_flag=True, help="Show each parameter's range and help, and the presets.")
@click.option(
    "--backbones",
    is_flag=True,
    help="List backbones instead: the short aliases (with the timm model and "
    "arguments each stands for), then the timm models matching PATTERN.",
)
@click.option(
    "--methods",
    is_flag=True,
    help="List pretraining methods instead (train --method), with their --method-arg options, ranges and defaults.",
)
@click.option(
    "--probes",
    is_flag=True,
    help="List the frozen-feature probes instead (probe --probe), with their "
    "--probe-arg options (-v: ranges and help).",
)
def list_command(pattern: str, verbose: bool, backbones: bool, methods: bool, probes: bool) -> None:
    """List pretext tasks (or --backbones, --methods, --probes) matching PATTERN (shell wildcards, default all)."""
    if backbones:
        return list_backbone_names(pattern)
    listing = METHOD_LISTING if methods else PROBE_LISTING if probes else TASK_LISTING
    debug = click.get_current_context().find_root().params.get("debug")
    list_registry(listing, pattern, verbose, debug)


def list_registry(listing: Listing, pattern: str, verbose: bool, debug: bool = False) -> None:
    """Each entry matching `pattern`: its name, summary and plugin origin, then its parameters (a line each with
    range, default and help; or, in a plain listing of a registry without `full_params`, one line of defaults)
    and, verbose, its presets. Then every broken plugin (`debug`: with its traceback) and shadowed one."""
    registry = listing.registry
    entries = registry.entries()  # the built-ins read from their source: no torch
    names = [name for name in entries if fnmatch.fnmatch(name, pattern)]
    for name in sorted(names) if listing.sort else names:
        entry = entries[name]
        source = registry.plugin_of.get(name)
        click.echo(f"{name:<18} {summary_of(entry)}" + (f" [plugin {source}]" if source else ""))
        params = getattr(entry, listing.params, None) or {}
        if verbose or listing.full_params:
            for key, param in params.items():
                click.echo(f"{'':<18}   {listing.option} {key}=...  {param.describe()}. {param.help}".rstrip())
        elif params:
            click.echo(
                f"{'':<18}   "
                + ", ".join(
                    f"{k}=auto ({p.default_text()})" if getattr(p, "scaled", "") else f"{k}={p.default}"
                    for k, p in params.items()
                )
            )
        if verbose:
            for preset, values in (getattr(entry, "presets", None) or {}).items():
                click.echo(f"{'':<18}   --preset {preset}: {', '.join(f'{k}={v}' for k, v in values.items())}")
    for name, error in registry.broken.items():
        click.echo(f"{name:<18} BROKEN plugin: {error}")
        if debug:
            click.echo(registry.tracebacks.get(name, ""), err=True)
    for name, note in registry.shadowed.items():
        click.echo(f"{name:<18} IGNORED plugin (the built-in '{name}' wins): {note}")


def summary_of(entry) -> str:
    """A task's `summary()`, a method's own `summary` line, else the first line of the docstring (a probe's); a
    built-in read from its source (`Declared`) has it already."""
    if isinstance(entry, Declared):
        return entry.summary
    summary = getattr(entry, "summary", None)
    if callable(summary):
        return summary()
    own = vars(entry).get("summary") if isinstance(entry, type) else None  # not inherited: the base's is empty
    if isinstance(own, str) and own:
        return own
    doc = (entry.__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def list_backbone_names(pattern: str) -> None:
    from pretexts.backbones.factory import ALIASES, list_backbones

    aliases = [a for a in ALIASES if fnmatch.fnmatch(a, pattern)]
    for alias in aliases:
        timm_name, kwargs = ALIASES[alias]
        args = ", ".join(f"{k}={v}" for k, v in kwargs.items())
        click.echo(f"{alias:<18} alias of timm {timm_name}" + (f" ({args})" if args else ""))
    models = [m for m in list_backbones(pattern) if m not in ALIASES]
    click.echo(f"{len(models)} timm models match '{pattern}'" + (":" if models else "."))
    for name in models:
        click.echo(f"  {name}")
