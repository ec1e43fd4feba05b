"""`pretexts export`: a pretrained or fine-tuned backbone for timm, as a Hub-ready folder or one weights file."""

from pathlib import Path

import click

from ..errors import ParameterError
from . import main, wrote_folder
from .user_paths import UserPath


@main.command("export")
@click.option(
    "--checkpoint",
    type=UserPath(),
    required=True,
    help="checkpoint.pt of `pretexts train`, or checkpoint.pt / finetuned.pt of `pretexts finetune`.",
)
@click.option(
    "--out",
    type=UserPath(),
    required=True,
    help="A folder (Hub-ready: model.safetensors + config.json, loads with "
    "timm's local-dir:), or a single weights file ending in .safetensors or .pth.",
)
@click.option(
    "--push-to-hub",
    "push_to_hub",
    default=None,
    metavar="REPO",
    help="Also upload to this Hugging Face Hub repository, USER/REPO (needs a Hub login: `hf auth login`, "
    "`huggingface-cli login` before huggingface_hub 0.34, or HF_TOKEN); an id the Hub would refuse is refused "
    "before anything is written.",
)
@click.option("--private", is_flag=True, help="With --push-to-hub: create the repository private.")
@click.option("--force", is_flag=True, help="Replace an earlier export (or run) in --out; never the checkpoint.")
def export_command(checkpoint: str, out: str, push_to_hub: str | None, private: bool, force: bool) -> None:
    """Write the model's weights for timm; prints the line that loads them (also in the export's json)."""
    if private and not push_to_hub:  # a local export has no repository to make private
        raise ParameterError(
            "--private makes the Hub repository private and needs --push-to-hub USER/REPO; leave it out for a "
            "local export."
        )
    from pretexts.engine import export_backbone

    info = export_backbone(checkpoint, out, push_to_hub=push_to_hub, private=private, force=force)
    size = "x".join(map(str, info["input_size"][1:]))
    files = f"wrote {out} and {info['file'].rsplit('.', 1)[0]}.json" if not Path(out).is_dir() else wrote_folder(out)
    click.echo(
        f"{files} ({info['tensors']} tensors, {info['parameters']:,} parameters of {info['timm_name']}, "
        f"{size} px). Load it with:"
    )
    click.echo(f"  import timm; model = {info['load']}")
    if "hub" in info:
        click.echo(f"pushed to {info['hub']}; load it with timm.create_model('hf-hub:{push_to_hub}', pretrained=True)")
