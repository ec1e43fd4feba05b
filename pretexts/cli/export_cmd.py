"""`pretexts export`: a pretrained backbone as a timm weights file."""
import click

from . import main


@main.command("export")
@click.option("--checkpoint", required=True, help="A checkpoint.pt written by `pretexts train`.")
@click.option("--out", required=True, help="The weights file: .safetensors, or .pth for torch.save.")
def export_command(checkpoint: str, out: str) -> None:
    """Write the backbone's weights for timm; prints the line that loads them (also in OUT .json)."""
    from engine import export_backbone

    info = export_backbone(checkpoint, out)
    click.echo(f"wrote {out} ({info['tensors']} tensors, {info['parameters']:,} parameters of {info['timm_name']}) "
               f"and {info['file'].rsplit('.', 1)[0]}.json. Load it with:")
    click.echo(f"  import timm; model = {info['load']}")
