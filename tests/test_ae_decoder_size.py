"""`--method ae` sizes its ViT token decoder as `--method mae` does: MAE's 8 blocks of width 512 from ViT-B's width
up (the paper's AE baselines follow MAE), the light 2 x 128 below; the method arguments override either."""

import pretexts
from pretexts import backbones
from pretexts.engine.methods.autoencoder import AutoencoderModel
from pretexts.engine.methods.mae_model import decoder_defaults


def ae_decoder(name: str, **sizes):
    backbone = backbones.create_backbone(name, img_size=32)
    model = AutoencoderModel(backbone, pretexts.create_pretext("super-resolution"), 32, name, **sizes)
    blocks = model.decoder.blocks
    return model.decoder.embed.out_features, len(blocks), blocks[0].attn.num_heads


def test_a_vit_base_wide_backbone_gets_maes_decoder_as_the_mae_method_does():
    assert ae_decoder("vit_base") == (512, 8, 16)
    mae = decoder_defaults(768)
    assert (mae["decoder_dim"], mae["decoder_depth"], mae["decoder_heads"]) == (512, 8, 16)


def test_a_narrow_backbone_keeps_the_light_decoder_and_the_arguments_override():
    assert ae_decoder("vit_tiny") == (128, 2, 4)
    assert ae_decoder("vit_tiny", decoder_dim=64, decoder_depth=1, decoder_heads=2) == (64, 1, 2)
    assert ae_decoder("vit_base", decoder_depth=2) == (512, 2, 16)


def test_a_cnn_keeps_its_128_wide_pyramid_however_wide():
    backbone = backbones.create_backbone("resnet50", img_size=32)  # 2048 features: the rule is the ViT decoder's
    model = AutoencoderModel(backbone, pretexts.create_pretext("colorization"), 32, "resnet50")
    assert model.decoder.head.classify.in_channels == 128
