"""`pretexts list`: the registered tasks, their parameters and presets, and broken plugins."""
import click

from ..registry import (broken_plugins, broken_traceback, get_pretext_class, list_pretexts, plugin_of,
                        shadowed_plugins)
from . import main


@main.command("list")
@click.argument("pattern", default="*")
@click.option("-v", "--verbose", is_flag=True, help="Show each parameter's range and help, and the presets.")
@click.option("--backbones", is_flag=True, help="List backbones instead: the short aliases (with the timm model and "
              "arguments each stands for), then the timm models matching PATTERN.")
@click.option("--methods", is_flag=True, help="List pretraining methods instead (train --method), with their "
              "--method-arg options, ranges and defaults.")
@click.option("--probes", is_flag=True, help="List the frozen-feature probes instead (probe --probe).")
def list_command(pattern: str, verbose: bool, backbones: bool, methods: bool, probes: bool) -> None:
    """List pretext tasks (or --backbones, --methods, --probes) matching PATTERN (shell wildcards, default all)."""
    if backbones:
        return list_backbone_names(pattern)
    if methods:
        return list_method_names(pattern)
    if probes:
        return list_probe_names(pattern)
    for name in list_pretexts(pattern):
        cls = get_pretext_class(name)
        defaults = ", ".join(f"{k}={p.default}" for k, p in cls.params.items())
        source = plugin_of(name)
        click.echo(f"{name:<18} {cls.summary()}" + (f" [plugin {source}]" if source else ""))
        if defaults and not verbose:
            click.echo(f"{'':<18}   {defaults}")
        if verbose:
            for key, param in cls.params.items():
                click.echo(f"{'':<18}   --task-arg {key}=...  {param.describe()}. {param.help}".rstrip())
            for preset, values in cls.presets.items():
                click.echo(f"{'':<18}   --preset {preset}: {', '.join(f'{k}={v}' for k, v in values.items())}")
    debug = click.get_current_context().find_root().params.get("debug")
    for name, error in broken_plugins().items():
        click.echo(f"{name:<18} BROKEN plugin: {error}")
        if debug:
            click.echo(broken_traceback(name), err=True)
    for name, note in shadowed_plugins().items():
        click.echo(f"{name:<18} IGNORED plugin (the built-in '{name}' wins): {note}")


def list_backbone_names(pattern: str) -> None:
    import fnmatch

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


def list_method_names(pattern: str) -> None:
    import fnmatch

    from pretexts.engine.methods import METHODS, list_methods

    for name, trainer in list_methods().items():
        if not fnmatch.fnmatch(name, pattern):
            continue
        source = METHODS.plugin_of.get(name)
        summary = vars(trainer).get("summary") or (trainer.__doc__ or "").strip().split("\n")[0]  # not inherited
        click.echo(f"{name:<18} {summary}" + (f" [plugin {source}]" if source else ""))
        for key, param in trainer.method_params.items():
            click.echo(f"{'':<18}   --method-arg {key}=...  {param.describe()}. {param.help}".rstrip())
    for name, error in METHODS.broken.items():
        click.echo(f"{name:<18} BROKEN plugin: {error}")
    for name, note in METHODS.shadowed.items():
        click.echo(f"{name:<18} IGNORED plugin (the built-in '{name}' wins): {note}")


def list_probe_names(pattern: str) -> None:
    import fnmatch

    from ..registry import PROBES

    PROBES.load()
    for name, probe in PROBES.table.items():
        if fnmatch.fnmatch(name, pattern):
            source = PROBES.plugin_of.get(name)
            summary = (probe.__doc__ or "").strip().split("\n")[0]
            click.echo(f"{name:<18} {summary}" + (f" [plugin {source}]" if source else ""))
    for name, error in PROBES.broken.items():
        click.echo(f"{name:<18} BROKEN plugin: {error}")
