"""Images <-> rows of patch pixels, in timm's row-major patch order: the one layout every pixel decoder predicts."""

from torch import Tensor


def patch_size(patch: int | tuple[int, int]) -> tuple[int, int]:
    return (patch, patch) if isinstance(patch, int) else tuple(patch)


def patchify(images: Tensor, patch: int | tuple[int, int]) -> Tensor:
    """[B, C, H, W] -> [B, L, ph * pw * C], each row one patch in MAE's layout (p, q, c)."""
    (ph, pw), (b, c, h, w) = patch_size(patch), images.shape
    x = images.reshape(b, c, h // ph, ph, w // pw, pw).permute(0, 2, 4, 3, 5, 1)
    return x.reshape(b, (h // ph) * (w // pw), ph * pw * c)


def unpatchify(patches: Tensor, patch: int | tuple[int, int], grid: tuple[int, int], channels: int = 3) -> Tensor:
    """[B, rows * cols, ph * pw * C] -> [B, C, rows * ph, cols * pw]: `patchify` undone."""
    (ph, pw), (rows, cols), b = patch_size(patch), grid, patches.shape[0]
    x = patches.reshape(b, rows, cols, ph, pw, channels).permute(0, 5, 1, 3, 2, 4)
    return x.reshape(b, channels, rows * ph, cols * pw)
