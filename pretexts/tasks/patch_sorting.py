"""Patch sorting: restore shuffled position embeddings of a ViT (paper, Section 3.4 and Appendix A.2)."""

import torch
from torch import Tensor

from ..base import Corrupted, Pretext, rand
from ..errors import ParameterError
from ..params import Param
from ..registry import register


@register("patch-sorting")
class PatchSorting(Pretext):
    """Shuffle a ViT's sin-cos position embeddings across patches; restoration sorts them (paper, Table 2).

    ViT only (79.5 top-1 in Table 2). The state is the per-image embeddings [B, L, D] (row i is what
    patch i is told about its place), the target the true table, the loss MSE between them (Section
    3.4). The image, in `context`, is intact but for the two regularisers of Appendix A.2:
    - edge masking: the k outermost pixel rows and columns of every patch are set to 0 in [0, 1] pixels (black,
      before normalisation), k drawn for each patch uniformly from 1..edge_max (the paper: 1 or 2, 50 % each).
      The paper sets them "to all zeros" without naming the pixel space; read in normalised pixels (MAE's
      pipeline) its zeros are the normalisation mean, which adds nothing to a patch's embedding, where black
      adds W (-mean / std) for each such pixel;
    - patch dropout: a random `drop` fraction of each image's tokens (50 % in the paper) does not enter
      the blocks. The kept indices are drawn with the sample (info["keep"]), so all N restoration
      steps see the same tokens; they apply only while the model is in training mode. A dropped
      token's embedding gets no gradient and stays where it was; the loss still averages over all L.
    The task knows no model: the ViT's patch size, grid and sin-cos table reach it through `set_grid` as plain
    numbers and a tensor, from the model side (pretexts.engine.methods.states, the "positions" adapter, which
    also feeds the state to the ViT). Call `pretexts.engine.prepare_task(task, model)` (or `set_grid`) first.
    """

    state_kind = "positions"
    params = {
        "edge_max": Param(
            2,
            int,
            0,
            8,
            help="edge masking draws k in 1..edge_max per patch (left unset: 2, lowered to fit smaller patches); 0 "
            "turns it off",
        ),
        "drop": Param(0.5, float, 0.0, 0.95, help="fraction of patch tokens dropped before the blocks (training)"),
    }

    patch: tuple[int, int] | None = None  # pixels per patch (height, width) of the ViT; set by set_grid
    grid: tuple[int, int] | None = None  # patches per image (rows, cols)
    table: Tensor | None = None  # the true sin-cos embeddings [rows * cols, D]
    edge: int = 0  # the edge masking's largest k on this ViT's patches; set by set_grid

    def __init__(self, preset: str | None = None, **kwargs):
        self.edge_given = "edge_max" in kwargs  # the paper's 2 left unset is lowered to fit smaller patches
        super().__init__(preset, **kwargs)

    def set_grid(self, patch: tuple[int, int], grid: tuple[int, int], table: Tensor) -> "PatchSorting":
        """Take the ViT's geometry: `patch` pixels per patch, `grid` patches per image, its sin-cos `table`. An
        `edge_max` left unset is lowered to the largest that leaves each patch a pixel (1 for vit_tiny's 4 px)."""
        smallest = min(patch)
        fits = (smallest - 1) // 2
        if self.edge_max > fits and self.edge_given:
            raise ParameterError(
                f"{self.name}: edge_max={self.edge_max} would blank whole {smallest}-pixel patches of the ViT; "
                f"use edge_max <= {fits}."
            )
        self.edge = min(self.edge_max, fits)
        self.patch, self.grid, self.table = tuple(patch), tuple(grid), table
        return self

    def draw(self, images: Tensor, generator=None) -> dict:
        """ "perm" [B, L] (patch i is told it sits at position perm[b, i]), "edge" [B, L] (patch i's k, in the
        ViT's row-major patch order; 0: no edge masking) and, with dropout, "keep" [B, K] (the kept token indices,
        sorted), drawn in that order."""
        if self.grid is None:
            raise ParameterError(
                f"{self.name}: the ViT's patch grid is not set; the model side gives it "
                f"(pretexts.engine.prepare_task(task, model))."
            )
        (rows, cols), (ph, pw) = self.grid, self.patch
        batch, _, height, width = images.shape
        if (height, width) != (rows * ph, cols * pw):
            raise ParameterError(
                f"{self.name}: images are {height}x{width} but the ViT expects {rows * ph}x{cols * pw}."
            )
        device, length = images.device, rows * cols
        params = {
            "perm": rand((batch, length), generator, device).argsort(1),
            "edge": torch.zeros(batch, length, dtype=torch.long, device=device),
        }
        if self.edge > 0:  # k uniform in 1..edge, for each patch (Appendix A.2)
            edge = (rand((batch, length), generator, device) * self.edge).long().clamp(max=self.edge - 1)
            params["edge"] = 1 + edge
        if self.drop > 0:
            kept = max(1, round(length * (1 - self.drop)))
            params["keep"] = rand((batch, length), generator, device).argsort(1)[:, :kept].sort(1).values
        return params

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        table = self.table.to(images.device)
        perm, edge = params["perm"], params["edge"]
        state = table[perm]  # patch i is told it sits at position perm[b, i]
        context = images
        if self.edge > 0:
            # 0 in [0, 1] pixels: the paper's "all zeros" read before normalisation (black)
            context = images.masked_fill(self._edge_mask(edge, *images.shape[-2:]), 0.0)
        info = {"perm": perm, "edge": edge, "image": images}  # the clean image, for preview
        if "keep" in params:
            info["keep"] = params["keep"]
        target = table.expand(images.shape[0], -1, -1).contiguous()
        return Corrupted(state=state, target=target, context=context, info=info)

    def _edge_mask(self, edge: Tensor, height: int, width: int) -> Tensor:
        """[B, 1, H, W] True on the `edge[b, i]` outermost pixel rows and columns of patch i (row-major)."""
        (rows, cols), (ph, pw) = self.grid, self.patch
        k = edge.view(-1, rows, 1, cols, 1)  # [B, patch row, pixel row in it, patch column, pixel column in it]
        y = torch.arange(ph, device=edge.device).view(ph, 1, 1)
        x = torch.arange(pw, device=edge.device)
        mask = (y < k) | (y >= ph - k) | (x < k) | (x >= pw - k)  # [B, rows, ph, cols, pw]: no [B, H, W] of k
        return mask.reshape(-1, 1, height, width)

    def preview(self, sample: Corrupted, state: Tensor) -> Tensor:
        """The clean image as the state arranges it: each position shows the patch whose embedding is
        nearest to that position's true embedding (shuffled at step 0, the original once sorted)."""
        (rows, cols), (ph, pw) = self.grid, self.patch
        image = sample.info.get("image", sample.context)
        batch = image.shape[0]
        table = self.table.to(state.device, state.dtype).expand(batch, -1, -1)
        source = torch.cdist(table, state.detach()).argmin(-1)  # [B, L]: position j shows patch source[j]
        patches = image.unfold(2, ph, ph).unfold(3, pw, pw)  # [B, 3, rows, cols, ph, pw]
        patches = patches.permute(0, 2, 3, 1, 4, 5).reshape(batch, rows * cols, -1)
        picked = patches.gather(1, source.unsqueeze(-1).expand(-1, -1, patches.shape[-1]))
        picked = picked.view(batch, rows, cols, 3, ph, pw).permute(0, 3, 1, 4, 2, 5)
        return picked.reshape(batch, 3, rows * ph, cols * pw).clamp(0, 1)
