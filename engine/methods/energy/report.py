"""The energy method's held-out report: the restoration error per step, or with N = 0 (nothing restored) how
often the energy ranks the clean image below the corrupted one."""

from dataclasses import dataclass

from pretexts.engine.methods.energy.restore import PATCH_CENTRED
from pretexts.engine.methods.report import HeldOut


@dataclass
class RestorationHeldOut(HeldOut):
    """`HeldOut` whose outputs are the N restoration steps; with N = 0 `extra` holds 'ranked_right' (the share of
    images whose clean energy is below the corrupted one's) and 'energy_gap' (the mean difference); for a masking
    task 'known_kept_mse', the last step's MSE with the known (unmasked) pixels put back."""

    def format(self) -> str:
        if self.restored_mse:
            return super().format()
        images = f"{self.images} image{'' if self.images == 1 else 's'}"
        return (
            f"held-out on {images} (N = 0, nothing restored): the energy ranks the clean image "
            f"below the corrupted one for {100 * self.extra['ranked_right']:.1f}% (mean gap "
            f"{self.extra['energy_gap']:.4g})"
        )

    def figure_numbers(self) -> str:
        """`HeldOut.figure_numbers`, with the last step's MSE with the known pixels put back where it was measured:
        'MSE of these 8: corrupted 0.0355, restored 0.0284 (known pixels kept 0.0262), trivial ...'."""
        line = super().figure_numbers()
        kept = self.extra.get("known_kept_mse")
        if not line or kept is None:
            return line
        restored = f", {self.result} {self.restored_mse[-1]:.4f}"
        return line.replace(restored, f"{restored} (known pixels kept {kept:.4f})", 1)


def restoration_report(
    images: int,
    corrupted_mse: float,
    restored_mse: list[float],
    trivial_mse=None,
    trivial_restorer=None,
    measure: str = "restoration MSE",
    **extra,
) -> RestorationHeldOut:
    """The report of `restoration_error`: one output per step, 'step 1' ... 'step N'; `measure` names the error
    (patch sorting's is between position embeddings, not pixels)."""
    return RestorationHeldOut(
        images,
        corrupted_mse,
        restored_mse,
        tuple(f"step {j}" for j in range(1, len(restored_mse) + 1)),
        trivial_mse=trivial_mse,
        trivial_restorer=trivial_restorer,
        measure=measure,
        extra=extra,
    )


LOSS_WORDS = {"mse": "MSE", "smooth_l1": "smooth L1", PATCH_CENTRED: "patch-centred MSE"}


def restoration_loss_name(
    kind: str, patch: int | None = None, steps: int = 1, state_kind: str = "pixels", what: str = "restoration"
) -> str:
    """What `restoration_loss` of `kind` measures, for the loss curve's axis: 'restoration error (patch-centred
    MSE, 16-px patches; mean of 2 steps)', 'reconstruction error (MSE, pixels in [0, 1])' (`what`: the AE's)."""
    words = LOSS_WORDS.get(kind, kind)
    if state_kind != "pixels":
        words += f" of {'position embeddings' if state_kind == 'positions' else state_kind + ' states'}"
    elif kind == PATCH_CENTRED:
        words += f", {patch}-px patches" if patch else ""  # its patch is known once the model is built
    else:
        words += ", pixels in [0, 1]"
    return f"{what} error ({words}{f'; mean of {steps} steps' if steps > 1 else ''})"
