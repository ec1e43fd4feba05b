"""Semantic segmentation fine-tuning: the paper's ADE20K transfer table (MAE's UperNet protocol)."""
