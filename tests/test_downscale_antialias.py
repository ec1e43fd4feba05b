"""Images larger than the model's size are shrunk with antialiasing everywhere: pretraining's crops, the held-out /
monitor / restore images and segment's images average the pixels they cover, as finetune's and probe's PIL resize
does, so the same file reaches the model the same way in every command. Segment's masks stay nearest (labels are
not blended), and 32 px images at 32 px (the embedded CIFAR demo) come out exactly as before."""

import albumentations as A
import numpy as np
import pytest
import torch
from cli_runs import one_torch_thread  # noqa: F401 (autouse)
from PIL import Image

from pretexts.engine.data.labelled_data import eval_transform
from pretexts.engine.data.loader import Augment, pretrain_transform, unaugmented_transform
from pretexts.engine.evaluation.segmentation.data import SegmentationFolder


def stripes(height: int = 500, width: int = 500) -> np.ndarray:
    """1 px black and white columns: any filtered shrink to 32 px is flat 0.5 gray."""
    image = np.zeros((height, width, 3), np.uint8)
    image[:, ::2] = 255
    return image


def pixels(array: np.ndarray) -> torch.Tensor:
    return torch.as_tensor(np.asarray(array), dtype=torch.float32) / 255


def test_pretraining_crops_of_fine_stripes_are_flat_gray():
    augment = Augment(pretrain_transform(32))
    crops = torch.stack([augment(Image.fromarray(stripes()), 0, seed)[0] for seed in range(16)])
    spread = (crops.float() / 255).flatten(1).std(1)
    assert spread.max() < 0.06, spread  # bilinear kept the stripes at full contrast: std 0.27


def test_held_out_images_are_shrunk_as_finetune_evaluates_them():
    flat = pixels(unaugmented_transform(32)(image=stripes())["image"])
    assert flat.std() < 0.03 and abs(flat.mean() - 0.5) < 0.01  # bilinear: std 0.29
    # coloured blocks with sharp edges, a patch of stripes in them: a photo's mix of flat areas and fine detail
    blocks = np.random.default_rng(0).integers(0, 256, (20, 25, 3), dtype=np.uint8)
    photo = np.array(Image.fromarray(blocks).resize((500, 400), Image.NEAREST))
    photo[100:300, 100:300] = stripes()[100:300, 100:300]
    for image in (stripes(), photo):
        held = pixels(unaugmented_transform(32)(image=image)["image"]).permute(2, 0, 1)
        finetune = eval_transform(32, (0, 0, 0), (1, 1, 1), crop_pct=1.0)(Image.fromarray(image))
        assert (held - finetune).abs().mean() < 0.03  # bilinear: 0.25 on the stripes, 0.13 on the photo


def test_32_px_images_at_32_px_are_unchanged():
    """No shrinking happens there, so the embedded demo's pretraining crops and held-out images are as before."""
    before_crop = A.Compose([A.RandomResizedCrop(size=(32, 32), scale=(0.2, 1.0)), A.HorizontalFlip()])
    before_held = A.Compose([A.SmallestMaxSize(max_size=32), A.CenterCrop(height=32, width=32)])
    images = np.random.default_rng(1).integers(0, 256, (8, 32, 32, 3), dtype=np.uint8)
    now_crop, now_held = pretrain_transform(32), unaugmented_transform(32)
    for seed, image in enumerate(images):
        for before, now in ((before_crop, now_crop), (before_held, now_held)):
            before.set_random_seed(seed)
            now.set_random_seed(seed)
            assert np.array_equal(before(image=image)["image"], now(image=image)["image"])


def segmentation_folder(root, size: int = 200):
    """Stripes for the image, columns alternating labels 1 and 3 for the mask: an averaged mask would hold 2."""
    labels = np.where(np.arange(size) % 2 == 0, 1, 3).astype(np.uint8)[None].repeat(size, 0)
    for split in ("training", "validation"):
        for sub in ("images", "masks"):
            (root / sub / split).mkdir(parents=True)
        Image.fromarray(stripes(size, size)).save(root / "images" / split / "a.png")
        Image.fromarray(labels).save(root / "masks" / split / "a.png")
    return root


@pytest.mark.parametrize("train, keep_aspect", [(True, False), (False, False), (False, True)])
def test_segment_shrinks_images_antialiased_and_masks_nearest(tmp_path, train, keep_aspect):
    root = segmentation_folder(tmp_path)
    split = "training" if train else "validation"
    data = SegmentationFolder(
        root, split, 32, train, num_classes=4, keep_aspect=keep_aspect, mean=(0, 0, 0), std=(1, 1, 1)
    )
    for epoch in range(4 if train else 1):
        image, mask = data[(epoch, 0)] if train else data[0]
        assert image.std() < 0.06, image.std()  # bilinear: 0.27 to 0.29
        assert set(mask.unique().tolist()) <= {1, 3}  # no label made up by averaging
