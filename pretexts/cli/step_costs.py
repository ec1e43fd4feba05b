"""The energy method's exact step (N=2) against a bf16 supervised step of the same batch, measured on one
H200 at 224 px with the package's CUDA defaults (docs/results/gpu-h100.md). Generated from that page's
measured table: do not edit (a test fails when the two differ)."""

MEASURED_ON = "one H200 in bf16 at 224 px"

EXACT_OVER_SUPERVISED = {
    "ViT-S/16": {32: 6.3, 128: 10.3},
    "ViT-B/16": {32: 5.7, 128: 10.1},
    "Swin-T": {32: 5.3, 128: 7.4},
    "ConvNeXt-T": {32: 5.3, 128: 6.2},
    "ResNet-50": {32: 8.2, 128: 8.4},
}
