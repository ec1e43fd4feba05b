"""How far each block of a pretrained ViT looks: the mean attention distance per block (Dosovitskiy et al. 2021,
Fig. 7; the measure papers use to tell masked-image models, local in their lower blocks, from others).

For each block, the attention of every patch query over the patch keys (the class token's share left out and the
rest renormalised), weighted by the distance in pixels between their centres, averaged over queries, images and
heads; beside it the nearest head's (the most local). Prints one row per model.

    python studies/representation/attention_distance.py --model mae=runs/mae/checkpoint.pt --random vit_tiny \\
        --data ../shared/data/cifar10-subset --images 256
"""

import json
from pathlib import Path

import torch
from pretrained_models import model_parser, models

from pretexts.backbones.factory import set_fused_attention
from pretexts.backbones.normalisation import normalisation
from pretexts.engine.data.labelled_data import LabelledImages, eval_transform
from pretexts.engine.evaluation.pretrained import downstream_splits


def patch_distances(grid: int, patch: int) -> torch.Tensor:
    """[P, P] distances in pixels between the centres of a grid x grid of patches."""
    ys, xs = torch.meshgrid(torch.arange(grid), torch.arange(grid), indexing="ij")
    centres = torch.stack([ys.flatten(), xs.flatten()], 1).float() * patch
    return torch.cdist(centres, centres)


@torch.no_grad()
def attention_distances(vit, images: torch.Tensor) -> list[tuple[float, float]]:
    """(mean over heads, nearest head) of each block's mean attention distance in pixels."""
    set_fused_attention(vit.eval(), False)  # the unfused path computes the attention matrix, hooked below
    maps = []
    hooks = [b.attn.attn_drop.register_forward_hook(lambda m, args, out: maps.append(out)) for b in vit.blocks]
    vit(images)
    for hook in hooks:
        hook.remove()
    prefix, patch = vit.num_prefix_tokens, vit.patch_embed.patch_size[0]
    distances = patch_distances(vit.patch_embed.grid_size[0], patch)
    found = []
    for attention in maps:  # [B, heads, N, N]
        patches = attention[:, :, prefix:, prefix:]
        patches = patches / patches.sum(-1, keepdim=True)
        per_head = (patches * distances).sum(-1).mean((0, 2))  # [heads]
        found.append((per_head.mean().item(), per_head.min().item()))
    return found


def main():
    parser = model_parser(__doc__.split("\n\n")[0], "attention_distance.json")
    parser.add_argument("--images", type=int, default=256, help="the first val images")
    args = parser.parse_args()
    table = {}
    for label, weights in models(args):
        _, val = downstream_splits(args.data, "given", weights.img_size, 0)
        data = LabelledImages(val, eval_transform(weights.img_size, *normalisation(weights.model)))
        images = torch.stack([data[i][0] for i in range(min(args.images, len(data)))])
        table[label] = attention_distances(weights.model, images)
        Path(args.out).write_text(json.dumps(table, indent=1))
    blocks = len(next(iter(table.values())))
    print("mean attention distance (px), all heads / nearest head | " + " | ".join(f"b{k + 1}" for k in range(blocks)))
    for label, row in table.items():
        print(f"{label} | " + " | ".join(f"{mean:.1f} / {near:.1f}" for mean, near in row))


if __name__ == "__main__":
    main()
