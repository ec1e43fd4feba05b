"""Sizes and tokens carried between commands: an export records the size its weights trained at, DeiT's distillation
token is kept wherever pretexts rebuilds a ViT's token sequence, SimMIM's automatic mask patch tiles the image, a
resampled sin-cos table still counts as the table, a Swin moves to another size as timm's own loader moves it, and
SimMIM's weight decay skips what the official optimiser skips."""

import pytest
import timm
import torch
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)

from pretexts import backbones, create_pretext
from pretexts.backbones.vit_tokens import LEARNED_POSITIONS, SINCOS_POSITIONS, starting_positions
from pretexts.base import Corrupted
from pretexts.engine import FinetuneConfig, PretrainConfig, export_backbone, finetune
from pretexts.engine.evaluation.pretrained import create_classifier
from pretexts.engine.methods.autoencoder import AutoencoderModel
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.methods.mae import MAEMethod
from pretexts.engine.methods.mae_model import MAEModel
from pretexts.engine.methods.simmim import SimMIMMethod
from pretexts.engine.methods.simmim_model import mask_patch_size
from pretexts.engine.methods.states import PositionStates
from pretexts.engine.training.checkpoint import save_checkpoint
from pretexts.errors import ParameterError

pytestmark = pytest.mark.usefixtures("single_thread")
DEIT = "deit_tiny_distilled_patch16_224"  # timm's distilled DeiT: class and distillation tokens, 2x2 patches at 32 px


def quick_finetune(out, **kwargs) -> None:
    settings = dict(epochs=1, max_steps_per_epoch=1, batch_size=8, workers=0, mixup=0, cutmix=0, randaug="none")
    finetune(FinetuneConfig(**settings, **kwargs, out=str(out)), echo=lambda line: None)


def exported_input_size(finetuned, out) -> tuple:
    export_backbone(str(finetuned), str(out))
    return timm.create_model(f"local-dir:{out}", pretrained=True).pretrained_cfg["input_size"]


def test_a_cnn_fine_tuned_at_48_px_exports_as_48_px(tmp_path):
    quick_finetune(tmp_path / "ft", from_scratch=True, backbone="test_convnext", img_size=48)
    assert exported_input_size(tmp_path / "ft" / "finetuned.pt", tmp_path / "export") == (3, 48, 48)


def test_a_cnn_fine_tuned_from_a_pretraining_checkpoint_exports_the_size_it_trained_at(tmp_path):
    ckpt, _ = write_checkpoint(tmp_path / "pre32.pt", "test_convnext")  # pretrained at 32 px
    quick_finetune(tmp_path / "ft48", checkpoint=str(ckpt), img_size=48)
    assert exported_input_size(tmp_path / "ft48" / "checkpoint.pt", tmp_path / "exp48") == (3, 48, 48)
    # no --img-size: the fine-tune ran at its pretraining checkpoint's size, here 64 px
    model = create_energy_model("test_convnext", img_size=64, positions="learned")
    config = PretrainConfig(backbone="test_convnext", img_size=64).to_dict()
    save_checkpoint({"config": config, "model": model.state_dict()}, tmp_path / "pre64.pt")
    quick_finetune(tmp_path / "ft64", checkpoint=str(tmp_path / "pre64.pt"))
    assert exported_input_size(tmp_path / "ft64" / "finetuned.pt", tmp_path / "exp64") == (3, 64, 64)


def test_patch_sorting_energy_keeps_deits_distillation_token_as_timms_forward_does():
    torch.manual_seed(0)
    model = create_energy_model(DEIT, img_size=32, depth=1).eval()
    vit = model.backbone
    assert vit.num_prefix_tokens == 2
    images = torch.rand(2, 3, 32, 32)
    table = vit.pos_embed[:, 2:].detach().expand(2, -1, -1)  # the patch rows: the sorted state
    sample = Corrupted(state=table, target=table, context=images, info={})
    with torch.no_grad():
        torch.testing.assert_close(PositionStates(None, model).energy(sample, table), model.energy(images))


def test_maes_encoder_keeps_deits_distillation_token_as_timms_forward_does():
    torch.manual_seed(0)
    mae = MAEModel(backbones.create_backbone(DEIT, img_size=32, depth=1), DEIT).eval()
    images = torch.rand(2, 3, 32, 32)
    every_patch = torch.arange(4).expand(2, -1)  # nothing masked, nothing shuffled
    with torch.no_grad():
        latent = mae.encode(images, every_patch)
        timm_tokens = mae.backbone.forward_features((images - mae.mean) / mae.std)
    assert mae.prefix == 2 and latent.shape[1] == 6
    torch.testing.assert_close(latent, timm_tokens)


def test_the_sorting_autoencoder_keeps_deits_distillation_token():
    torch.manual_seed(0)
    vit = backbones.create_backbone(DEIT, img_size=32, depth=1)
    model = AutoencoderModel(vit, create_pretext("patch-sorting", edge_max=1), 32, DEIT).eval()
    images = torch.rand(2, 3, 32, 32)
    with torch.no_grad():
        tokens = model.encode_unpositioned(images, None)
        vit.pos_embed.zero_()  # the baseline's encoder has no positions: timm's forward without them
        reference = vit.forward_features(model.normalize(images))[:, 2:]
    torch.testing.assert_close(tokens, reference)


def test_a_vit_with_a_prefix_token_pretexts_does_not_know_is_refused():
    vit = backbones.create_backbone("test_vit", img_size=32)
    vit.num_prefix_tokens += 1  # as a family with another kind of token would report
    with pytest.raises(ParameterError, match="prefix tokens"):
        MAEModel(vit, "test_vit")


@pytest.mark.parametrize("img_size", [44, 60])
def test_simmims_automatic_mask_patch_tiles_sizes_its_scaled_value_does_not(img_size):
    cfg = PretrainConfig(method="simmim", backbone="test_convnext", img_size=img_size)
    method = SimMIMMethod(cfg, create_pretext(cfg.task), torch.device("cpu"))
    method.setup()
    assert method.model.stem_stride == 4 and img_size % method.patch == 0 and method.patch % 4 == 0
    sample = method.corrupt(torch.rand(2, 3, img_size, img_size), torch.Generator().manual_seed(0))
    assert torch.isfinite(method.loss(sample))


def test_simmims_mask_patch_is_the_nearest_fitting_multiple_and_errors_name_one_that_fits():
    assert mask_patch_size(240, 16) == 48  # 32 x 240 / 224 = 34.3: 48 is the nearest multiple of 16 dividing 240
    assert [mask_patch_size(size, 4) for size in (32, 44, 60, 224)] == [4, 4, 12, 32]
    cfg = PretrainConfig(method="simmim", backbone="test_convnext", img_size=60, method_args={"mask_patch": 8})
    with pytest.raises(ParameterError, match="e.g. mask_patch=12"):
        SimMIMMethod(cfg, create_pretext(cfg.task), torch.device("cpu")).setup()


def test_a_sincos_table_resampled_to_another_size_still_counts_as_the_table(tmp_path):
    model = create_energy_model("vit_tiny", img_size=32, positions="sincos")
    config = PretrainConfig(backbone="vit_tiny", task="random-mask").to_dict()
    save_checkpoint({"config": config, "model": model.state_dict()}, tmp_path / "sincos.pt")
    resampled, _ = create_classifier(str(tmp_path / "sincos.pt"), img_size=48, resize=True, num_classes=0)
    assert starting_positions(resampled) == SINCOS_POSITIONS
    learned, _ = write_checkpoint(tmp_path / "learned.pt", "vit_tiny", "random-mask")
    resampled, _ = create_classifier(str(learned), img_size=48, resize=True, num_classes=0)
    assert starting_positions(resampled) == LEARNED_POSITIONS


def test_a_swin_checkpoint_moves_to_another_size_as_timm_loads_its_export(tmp_path):
    path, _ = write_checkpoint(tmp_path / "swin.pt", "swin_t")  # 32 px: windows 7/4/2/1
    moved, _ = create_classifier(str(path), img_size=48, resize=True, num_classes=0)  # windows 7/6/3/2
    export_backbone(str(path), str(tmp_path / "export"))
    reference = timm.create_model(f"local-dir:{tmp_path / 'export'}", pretrained=True, img_size=48).eval()
    images = torch.rand(2, 3, 48, 48, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        torch.testing.assert_close(moved.eval()(images), reference(images), atol=1e-5, rtol=1e-4)


def decay_of(method) -> dict:
    method.setup()
    names = {id(p): n for n, p in method.model.named_parameters()}
    return {names[id(p)]: group["weight_decay"] for group in method.param_groups() for p in group["params"]}


@pytest.mark.parametrize("backbone, exempt", [("test_vit", ("backbone.cls_token", "backbone.pos_embed"))])
def test_simmim_exempts_from_weight_decay_what_the_official_optimiser_does(backbone, exempt):
    # learned positions: the sin-cos table SimMIM starts a ViT from by default is frozen, in no group
    cfg = PretrainConfig(
        method="simmim", recipe="simmim", backbone=backbone, img_size=32, method_args={"positions": "learned"}
    )
    decay = decay_of(SimMIMMethod(cfg, create_pretext(cfg.task), torch.device("cpu")))
    assert all(decay[name] == 0 for name in ("mask_token", *exempt))
    assert decay["backbone.patch_embed.proj.weight"] == cfg.weight_decay
    swin = PretrainConfig(method="simmim", backbone="swin_t", img_size=64, method_args={})
    decay = decay_of(SimMIMMethod(swin, create_pretext(swin.task), torch.device("cpu")))
    tables = [name for name in decay if name.endswith("relative_position_bias_table")]
    assert tables and all(decay[name] == 0 for name in tables)


def test_maes_weight_decay_groups_stay_maes():
    cfg = PretrainConfig(method="mae", backbone="test_vit", img_size=32)
    decay = decay_of(MAEMethod(cfg, create_pretext(cfg.task), torch.device("cpu")))
    assert decay["mask_token"] == decay["backbone.cls_token"] == cfg.weight_decay  # MAE's add_weight_decay


def test_a_vit_whose_class_token_has_no_position_row_is_refused_in_one_line():
    """CaiT adds its class token after the patch blocks: its table holds only patch rows, so the prefix rows
    `prefix_tokens` adds would be a patch's."""
    from pretexts.backbones.vit_tokens import vit_geometry
    from pretexts.errors import ParameterError

    cait = timm.create_model("cait_xxs24_224", img_size=32, depth=1, pretrained=False)
    with pytest.raises(ParameterError, match=r"cannot use cait: its position table has 4 rows .* need 5"):
        vit_geometry(cait, "cait")


def test_cait_keeps_its_sincos_patch_table_in_an_energy_run():
    """The sin-cos table fills a CaiT's patch rows only (it has no prefix rows), as before the token checks."""
    from pretexts.backbones.vit_tokens import fix_sincos_positions

    cait = timm.create_model("cait_xxs24_224", img_size=32, depth=1, pretrained=False)
    fix_sincos_positions(cait, "cait", "positions=sincos")
    assert starting_positions(cait) == SINCOS_POSITIONS


def test_a_swin_whose_windows_keep_their_size_says_nothing_was_resized():
    from pretexts.engine.evaluation.pretrained import resampled_positions_note, resized_swin_tables

    swin = timm.create_model("swin_tiny_patch4_window7_224", img_size=64, depths=(1, 1, 1, 1), pretrained=False)
    state = resized_swin_tables(dict(swin.state_dict()), swin)  # the same windows: nothing to resize
    assert state.keys() == swin.state_dict().keys()
    assert resampled_positions_note(swin, 32, 64) is None
