"""Downstream evaluation of pretrained backbones (dense transfer and friends)."""
