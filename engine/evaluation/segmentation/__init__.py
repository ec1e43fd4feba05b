"""Semantic segmentation fine-tuning: the paper's ADE20K transfer table, run with MAE's and BEiT's protocol
(mmsegmentation's UperNet config; the paper gives no settings)."""
