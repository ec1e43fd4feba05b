"""The energy method (the paper's, `--method energy`): a backbone plus a one-output head is the energy; the
corrupted state is restored by N gradient steps down it (restore.py, double backward or finite
differences) and the restoration error is the loss (eq. 5). With N = 0 the corrupted images are negatives."""
import torch
import torch.nn.functional as F
from timm.optim import param_groups_weight_decay

from .model import create_energy_model
from pretexts.backbones.vit_tokens import sincos_positions
from pretexts.engine.methods import register_method
from pretexts.engine.evaluation.health import brightness, correlation
from pretexts.engine.methods.base import Method, add_or_none, trivial_sum, with_figure_numbers
from pretexts.engine.methods.energy.restore import contrastive_loss, restoration_loss, restore
from pretexts.engine.training.eval_mode import eval_mode


@register_method("energy")
class EnergyMethod(Method):
    summary = "the paper's: restore the corrupted image by N gradient steps down the energy (any backbone)"

    def build_model(self) -> torch.nn.Module:
        cfg = self.cfg
        return create_energy_model(cfg.backbone, img_size=cfg.img_size, alpha=cfg.alpha,
                                             head_init_std=cfg.head_init_std, energy_scale=cfg.energy_scale)

    def loss(self, sample) -> torch.Tensor:
        """The restoration loss of one corrupted batch (paper, eq. 5)."""
        if self.cfg.steps == 0:  # the paper's N = 0 point: corrupted images as negatives
            return contrastive_loss(self.model, self.task, sample)
        states = restore(self.model, self.task, sample, self.cfg.steps, grad_mode=self.cfg.grad_mode,
                         fd_delta=self.cfg.fd_delta)
        return restoration_loss(states, sample.target, self.cfg.loss)

    def held_out_error(self, batches) -> dict:
        return restoration_error(self.model, self.task, batches, self.cfg.steps, self.device, seed=self.cfg.seed)

    def figure_columns(self, images: torch.Tensor) -> dict:
        # the same seeded corruption as the columns: the title's numbers are the figure's own images
        self.figure_error = restoration_error(self.model, self.task, [images], self.cfg.steps, images.device,
                                              seed=self.cfg.seed)
        return figure_columns(self.model, self.task, images, self.cfg.steps, seed=self.cfg.seed)

    def figure_title(self) -> str:
        return with_figure_numbers(f"{self.cfg.task} on {self.cfg.backbone}", getattr(self, "figure_error", None))

    def param_groups(self) -> list:
        """No decay on norms, biases and alpha; alpha's lr scaled by `alpha_lr_scale` (Table A)."""
        alpha = self.model.log_alpha
        groups = param_groups_weight_decay(self.model, self.cfg.weight_decay, no_weight_decay_list=("log_alpha",))
        for group in groups:
            group["params"] = [p for p in group["params"] if p is not alpha]
        return [*groups, {"params": [alpha], "weight_decay": 0.0, "lr_scale": self.cfg.alpha_lr_scale}]

    def step_stats(self) -> dict:
        return {"alpha": self.model.alpha.item()}

    def monitor_scalars(self, images: torch.Tensor, features: torch.Tensor) -> dict:
        """The energy's correlation with mean brightness: near -1 when it has learnt "how dark is the image"."""
        energy = self.model.score(features.to(self.device)).float()  # the head lives on the model's device
        return {"energy_brightness_corr": correlation(energy.cpu(), brightness(images).cpu())}

    def probe_forward(self, images: torch.Tensor) -> None:
        self.model.energy(images)

    @staticmethod
    def fine_tuning_positions(pos: torch.Tensor, backbone: torch.nn.Module) -> torch.Tensor:
        """The fixed sin-cos table the energy method fed patch sorting's tokens instead (Appendix A.2)."""
        return sincos_positions(pos, backbone)


def restoration_error(model, task, batches, steps: int, device, seed: int = 0) -> dict:
    """Pixel (or state) MSE to the target of the corrupted input, of each restored step and of the task's
    trivial restorer ('trivial_mse', named in 'trivial_restorer'; absent when the task has none).

    `batches` yields float [B,3,H,W] in [0,1]. The corruption is seeded, so two models are
    compared on the same corrupted images.
    """
    generator = torch.Generator(device=device).manual_seed(seed)
    corrupted, restored, count = 0.0, [0.0] * steps, 0
    ranked, gap, trivial = 0.0, 0.0, 0.0
    with eval_mode(model), torch.no_grad():
        for images in batches:
            images = images.to(device)
            sample = task(images, generator)
            states = restore(model, task, sample, steps)
            n = images.shape[0]
            corrupted += F.mse_loss(sample.state.float(), sample.target.float()).item() * n
            for j, state in enumerate(states):
                restored[j] += F.mse_loss(state.float(), sample.target.float()).item() * n
            trivial = add_or_none(trivial, trivial_sum(task, sample))
            if steps == 0:  # N = 0 restores nothing: how well the energy ranks clean below corrupted
                difference = task.energy(model, sample, sample.state) - task.energy(model, sample, sample.target)
                ranked += (difference > 0).sum().item()
                gap += difference.sum().item()
            count += n
    if count == 0:
        raise ValueError("no held-out images to evaluate")
    error = {"corrupted_mse": corrupted / count, "restored_mse": [r / count for r in restored], "images": count}
    if trivial is not None:
        error.update(trivial_mse=trivial / count, trivial_restorer=task.trivial_restorer)
    if steps == 0:
        error.update(ranked_right=ranked / count, energy_gap=gap / count)
    return error


def figure_columns(model, task, images: torch.Tensor, steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """{'corrupted': ..., 'step 1': ..., ..., 'original': ...} as images for `restoration_figure`."""
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        sample = task(images, generator)
        states = restore(model, task, sample, steps)
    columns = {"corrupted": task.preview(sample, sample.state)}
    for j, state in enumerate(states, 1):
        columns[f"step {j}"] = task.preview(sample, state)
    columns["original"] = images
    return columns
