"""The models a per-block benchmark reads (block_probes.py, attention_distance.py): labelled checkpoints and
backbones at random init, from the same four options."""

import argparse
from collections.abc import Iterator

from pretexts.engine.evaluation.weights import Weights, load_backbone


def model_parser(description: str, out: str) -> argparse.ArgumentParser:
    """--model LABEL=CHECKPOINT and --random BACKBONE (repeatable), --img-size, --data and --out."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--model", action="append", default=[], help="LABEL=CHECKPOINT, repeatable")
    parser.add_argument("--random", action="append", default=[], help="a backbone at random init (seed 0)")
    parser.add_argument("--img-size", type=int, default=32, help="of --random")
    parser.add_argument("--data", default="../shared/data/cifar10-subset")
    parser.add_argument("--out", default=out)
    return parser


def models(args: argparse.Namespace) -> Iterator[tuple[str, Weights]]:
    """(label, weights) of each --model, then each --random, loaded one at a time."""
    for label in args.model:
        name, checkpoint = label.split("=", 1)
        yield name, load_backbone(checkpoint)
    for backbone in args.random:
        yield f"{backbone} random init", load_backbone(None, None, backbone, args.img_size, 0)
