"""`pretexts list`: what is registered (tasks, or --methods, --probes) with its parameters, and the plugins that
failed or were shadowed; or the backbones (--backbones)."""

import fnmatch
from dataclasses import dataclass

import click

from ..errors import suggest
from ..listing_cache import summary_of
from ..registry import METHODS, PROBES, TASKS, Registry
from . import main
from .list_backbones import list_backbones


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
    help="List backbones instead: the aliases (with the timm model and arguments each stands for), the families "
    "with the methods that take them and the energy step's measured cost, and how many timm models match PATTERN.",
)
@click.option("--all", "every", is_flag=True, help="With --backbones: also every timm model name matching PATTERN.")
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
def list_command(pattern: str, verbose: bool, backbones: bool, every: bool, methods: bool, probes: bool) -> None:
    """List pretext tasks (or one of --backbones, --methods, --probes) matching PATTERN (wildcards; default all)."""
    kinds = [flag for flag, on in (("--backbones", backbones), ("--methods", methods), ("--probes", probes)) if on]
    if len(kinds) > 1:
        raise click.UsageError(
            f"{', '.join(kinds[:-1])} and {kinds[-1]} list different things; give one of them per listing "
            f"(`pretexts list {kinds[0]}`, then `pretexts list {kinds[1]}`)."
        )
    if every and not backbones:
        raise click.UsageError(
            "--all adds every timm model name to the backbones' listing; give it with --backbones "
            "(`pretexts list --backbones --all`)."
        )
    if backbones:
        return list_backbones(pattern, every)
    listing = METHOD_LISTING if methods else PROBE_LISTING if probes else TASK_LISTING
    debug = click.get_current_context().find_root().params.get("debug")
    list_registry(listing, pattern, verbose, debug)


def list_registry(listing: Listing, pattern: str, verbose: bool, debug: bool = False) -> None:
    """Each entry matching `pattern`: its name, summary and plugin origin, then its parameters (a line each with
    range, default and help; or, in a plain listing of a registry without `full_params`, one line of defaults)
    and, verbose, its presets. Then every broken plugin (`debug`: with its traceback) and shadowed one."""
    registry = listing.registry
    entries = registry.entries()  # the built-ins from the listing cache: no torch
    names = [name for name in entries if fnmatch.fnmatch(name, pattern)]
    if not names:  # a bare word matches only itself: say so rather than print nothing
        wildcard = (
            "" if any(c in pattern for c in "*?[") else f" (a shell wildcard: '{pattern}*' lists names it begins)"
        )
        click.echo(f"no {registry.kind} matches '{pattern}'{wildcard}.{suggest(pattern, entries)}", err=True)
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
