"""`pretexts list --backbones [PATTERN] [--all]`: one screen on choosing a backbone. The aliases, then each family
with the methods that take it and what the energy method's step costs on it; timm's every name only with --all."""

import fnmatch

import click

from pretexts.cli.step_costs import EXACT_OVER_SUPERVISED, MEASURED_ON

# family, its timm names, the methods that take it (engine/methods: MAE needs a plain ViT; SimMIM a patch embedding,
# a stem or conv1 + max-pool; finite differences a smooth energy: no BatchNorm, ReLU or max-pool), its backbones in
# the measured GPU table (step_costs.py, generated from it) and the exact step on a CPU (docs/results/cpu-speed.md:
# fp32, 2 threads, 32 px, batch 32)
FAMILIES = (
    ("ViT (vit_*)", "vit_*", "energy ae mae simmim", ("ViT-S/16", "ViT-B/16"), "vit_tiny 4.95x"),
    ("Swin (swin*)", "swin*", "energy ae simmim", ("Swin-T",), ""),
    ("ConvNeXt (convnext*)", "convnext*", "energy ae simmim", ("ConvNeXt-T",), "convnext_atto 4.25-4.89x"),
    ("ResNet (resnet*)", "resnet*", "energy* ae simmim", ("ResNet-50",), ""),
)
OTHER = ("other timm models", None, "energy* ae simmim?", (), "")
NOTES = {
    "*": "* exact grad mode only with BatchNorm or ReLU/max-pool (finite differences refuse them).",
    "?": "? simmim needs a patch embedding, a stem or conv1 + max-pool.",
}


def gpu_costs(names: tuple) -> str:
    """'ViT-S/16 5.9x / 7.1x, ...': the exact step at batch 32 / 128, or 'not measured'."""
    costs = [f"{n} {' / '.join(f'{x}x' for x in EXACT_OVER_SUPERVISED[n].values())}" for n in names]
    return ", ".join(costs) or "not measured"


def family_of(name: str) -> tuple:
    return next((f for f in FAMILIES if fnmatch.fnmatch(name, f[1])), OTHER)


def list_backbones(pattern: str, every: bool) -> None:
    """The aliases matching `pattern` (with the timm model and arguments each stands for), the families of the
    matching names, and how many timm models match; `every`: their names too."""
    import timm

    from pretexts.backbones.factory import ALIASES, BROKEN, load_backbone_plugins
    from pretexts.engine.training.config import PretrainConfig

    load_backbone_plugins()  # a plugin's timm models are listed with timm's
    for why in BROKEN.values():
        click.echo(f"BROKEN backbone plugin: {why}")

    aliases = {a: ALIASES[a] for a in ALIASES if fnmatch.fnmatch(a, pattern)}
    models = timm.list_models(pattern)
    if aliases:
        click.echo("Aliases (--backbone NAME; any timm model name works too):")
        for alias, (timm_name, kwargs) in aliases.items():
            details = [f"{k}={v}" for k, v in kwargs.items()] + ["the default"] * (alias == PretrainConfig.backbone)
            click.echo(f"  {alias:<14} {timm_name}" + (f" ({', '.join(details)})" if details else ""))
    found = {family_of(name) for name in [*(timm_name for timm_name, _ in aliases.values()), *models]}
    families = [f for f in (*FAMILIES, OTHER) if f in found]
    if families:
        click.echo(
            "\nFamilies: the methods that take them; the energy method's exact step (N=2) against a\n"
            f"supervised step of the same batch (32 / 128), on {MEASURED_ON}\n"
            "(docs/results/gpu-h100.md):"
        )
        for name, _, methods, gpu, _ in families:
            click.echo(f"  {name:<21} {methods:<21} {gpu_costs(gpu)}")
        if cpu := ", ".join(f[4] for f in families if f[4]):
            line = f"On a CPU in fp32 (2 threads, 32 px, batch 32; docs/results/cpu-speed.md): {cpu}."
            click.echo(click.wrap_text(line, 88, initial_indent="  ", subsequent_indent="    "))
        shown = "".join(f[2] for f in families)
        for mark, note in NOTES.items():
            if mark in shown:
                click.echo(f"  {note}")
    if aliases or families:
        click.echo()
    more = "; add --all to list them" if models and not every else ""
    match = "model matches" if len(models) == 1 else "models match"
    click.echo(f"{len(models):,} timm {match} '{pattern}'" + (":" if models and every else f"{more}."))
    for name in models if every else ():
        click.echo(f"  {name}")
