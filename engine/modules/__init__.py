"""Shared nn building blocks that methods and evaluation both use: 4-scale backbone features (`features`),
dense heads (`dense_heads`: UperNet, a linear head), the pixel decoders of the reconstruction methods
(`decoders`) and `eval_mode` (eval mode for a block, the model's own mode restored after)."""
