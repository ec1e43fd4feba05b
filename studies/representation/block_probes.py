"""Frozen probes of every block of pretrained backbones: where in the depth each method's features are best.

Each model's images pass once; every block's output is pooled as `pretexts probe --block K` pools it (averaged over
positions, layer-normalised), beside the backbone's own pooled features, and each gets the linear probe (100
epochs, MAE's BatchNorm head) and the standardised kNN (k = 20) of `pretexts probe`, with the same defaults, so a
cell equals `pretexts probe --checkpoint CKPT --block K --probe linear --probe knn-std`. Prints one table per probe
(rows: models, columns: blocks) and writes them to --out as JSON.

    python studies/representation/block_probes.py --model mae=runs/mae/checkpoint.pt \\
        --model energy=runs/energy/checkpoint.pt --random vit_tiny \\
        --data ../shared/data/cifar10-subset --out block_probes.json
"""

import json
import time
from pathlib import Path

import torch
from pretrained_models import model_parser, models

from pretexts.backbones.normalisation import normalisation
from pretexts.engine.data.labelled_data import LabelledImages, eval_transform
from pretexts.engine.evaluation.pretrained import downstream_splits
from pretexts.engine.evaluation.probe import extract_features, probe_head, train_head
from pretexts.engine.evaluation.probe_config import HEAD_PARAMS
from pretexts.engine.measures.health import standardise
from pretexts.engine.measures.knn import knn_accuracy
from pretexts.engine.modules.features import block_count, pooled_block


class AllBlocks(torch.nn.Module):
    """Every block's pooled output and the backbone's own pooled features, concatenated (split after)."""

    def __init__(self, backbone):
        super().__init__()
        self.backbone, self.blocks = backbone, block_count(backbone)

    def forward(self, x):
        last, blocks = self.backbone.forward_intermediates(x, indices=self.blocks)
        pooled = self.backbone.forward_head(last, pre_logits=True)
        return torch.cat([pooled_block(b) for b in blocks] + [pooled], 1)


def block_features(weights, data: str, seed: int) -> tuple[list, list, list]:
    """(names, train features per name, val features per name) with the labels: 'block K' for each block, then
    'pooled'."""
    model = AllBlocks(weights.model.eval())
    train_source, val_source = downstream_splits(data, "given", weights.img_size, seed)
    transform = eval_transform(weights.img_size, *normalisation(weights.model))
    split = []
    for source in (train_source, val_source):
        features, labels = extract_features(model, LabelledImages(source, transform), torch.device("cpu"), workers=0)
        split.append((features, labels))
    widths = [info["num_chs"] for info in weights.model.feature_info] + [weights.model.num_features]
    names = [f"block {k + 1}" for k in range(model.blocks)] + ["pooled"]
    cut = lambda f: torch.split(f, widths, 1)  # noqa: E731
    return names, [(f, split[0][1]) for f in cut(split[0][0])], [(f, split[1][1]) for f in cut(split[1][0])]


def scores(train, val, num_classes: int, seed: int) -> dict:
    """The linear probe's and the standardised kNN's top-1, with `pretexts probe`'s defaults."""
    torch.manual_seed(seed)
    options = {key: param.default for key, param in HEAD_PARAMS.items()}
    linear = train_head(probe_head("linear", train[0].shape[1], num_classes), train, val, seed, **options)
    bank, query = standardise(train[0], val[0])
    knn = knn_accuracy(bank, train[1], query, val[1], num_classes, 20, 0.07)
    return {"linear": linear, "knn_std": knn}


def main():
    parser = model_parser(__doc__.split("\n\n")[0], "block_probes.json")
    parser.add_argument("--seed", type=int, default=0, help="the probe heads'")
    args = parser.parse_args()
    table = {}
    for label, weights in models(args):
        start = time.time()
        names, train, val = block_features(weights, args.data, args.seed)
        classes = int(train[0][1].max()) + 1
        table[label] = {name: scores(t, v, classes, args.seed) for name, t, v in zip(names, train, val)}
        print(f"{label}: {time.time() - start:.0f} s", flush=True)
        Path(args.out).write_text(json.dumps(table, indent=1))
    for probe in ("linear", "knn_std"):
        names = list(next(iter(table.values())))
        print(f"\n{probe} top-1 (%) | " + " | ".join(n.replace("block ", "b") for n in names))
        for label, row in table.items():
            print(f"{label} | " + " | ".join(f"{row[n][probe]:.1f}" for n in names))


if __name__ == "__main__":
    main()
