"""The energy method's exact step (N=2) against a bf16 supervised step of the same batch, measured on one
H100 at 224 px (docs/results/gpu-h100.md). Generated from that page's measured table: do not edit (a test
fails when the two differ)."""

EXACT_OVER_SUPERVISED = {
    "ViT-S/16": {32: 5.9, 128: 7.1},
    "ViT-B/16": {32: 5.4, 128: 11.0},
    "Swin-T": {32: 4.5, 128: 5.9},
    "ConvNeXt-T": {32: 5.1, 128: 6.7},
    "ResNet-50": {32: 7.4, 128: 8.8},
}
