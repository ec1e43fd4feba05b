"""Evaluation of pretrained backbones: fine-tuning, probes and kNN, segmentation transfer, export to timm,
and the energy diagnostics. Nothing here imports the pretraining loop."""
