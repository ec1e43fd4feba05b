"""`Method`: what a pretraining method owns. The loop (engine.training.loop.Pretrainer) runs every method
the same way: build the model once, then per step corrupt -> loss -> optimiser step, and at the end of an
epoch the held-out error and the figure. A method is one subclass in one file, `@register_method(name)`."""
import torch
import torch.nn.functional as F
from timm.optim import param_groups_weight_decay

from pretexts.errors import ParameterError

from pretexts.engine.data.labelled_data import normalisation


class Method:
    """Override `build_model`, `loss`, `held_out_error` and `figure_columns`; the rest has defaults."""

    summary = ""                 # one line for `pretexts list --methods`
    method_params: dict = {}     # its own options (`--method-arg KEY=VALUE`): name -> pretexts.Param

    def __init__(self, cfg, task, device: torch.device):
        self.cfg, self.task, self.device = cfg, task, device
        self.args = self.parse_args(cfg)
        self.model: torch.nn.Module | None = None  # set by the loop after `build_model`, moved to the device

    @classmethod
    def parse_args(cls, cfg) -> dict:
        """`cfg.method_args` checked against `method_params` and converted; defaults filled in."""
        unknown = [k for k in cfg.method_args if k not in cls.method_params]
        if unknown:
            raise ParameterError(f"method '{cfg.method}' has no argument '{unknown[0]}'; its arguments: "
                                 f"{', '.join(cls.method_params) or 'none'}.")
        return {k: param.convert(f"method {cfg.method}", k, cfg.method_args.get(k, param.default))
                for k, param in cls.method_params.items()}

    def build_model(self) -> torch.nn.Module:
        """The trained module; its `backbone.*` weights are what fine-tuning, probing and export take."""
        raise NotImplementedError

    def corruption(self) -> str:
        """What the run learns to undo, for the start line."""
        return f"'{self.cfg.task}'"

    def corrupt(self, images: torch.Tensor, generator: torch.Generator):
        """The step's sample from clean images [B,3,H,W] in [0,1]; the task's corruption unless the method
        has its own (MAE masks inside its model)."""
        return self.task(images, generator)

    def loss(self, sample) -> torch.Tensor:
        """The scalar loss of one corrupted sample; the loop runs it under autocast (and inside DDP's forward)."""
        raise NotImplementedError

    def held_out_error(self, batches) -> dict:
        """{'corrupted_mse', 'restored_mse': [...], 'images', ...} on the held-out `batches` (seeded); with
        'trivial_mse' and 'trivial_restorer' where the task has a trivial restorer (`Pretext.trivial_restore`)."""
        raise NotImplementedError

    def figure_columns(self, images: torch.Tensor) -> dict:
        """Column name -> images [B,3,H,W] for the restoration figure of `images`."""
        raise NotImplementedError

    def figure_title(self) -> str:
        """The figure's title; the loop asks for it after `figure_columns`, so a method that measured the
        figure's images there (`self.figure_error`, a held-out dict) puts the numbers in it."""
        return with_figure_numbers(f"{self.cfg.method}: {self.cfg.task} on {self.cfg.backbone}",
                                   getattr(self, "figure_error", None))

    def param_groups(self) -> list:
        """The optimiser's parameter groups: weight decay on all but norms and biases (timm's split)."""
        return param_groups_weight_decay(self.model, self.cfg.weight_decay)

    def step_stats(self) -> dict:
        """Scalars logged with each step's loss (the energy method's alpha)."""
        return {}

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Pooled backbone features [B, D] of clean images in [0, 1] (what the monitor and the probes measure)."""
        model = self.model
        mean, std = (model.mean, model.std) if hasattr(model, "mean") else \
            (torch.tensor(v, device=images.device).view(1, -1, 1, 1) for v in normalisation(model.backbone))
        return model.backbone((images - mean) / std)

    def monitor_scalars(self, images: torch.Tensor, features: torch.Tensor) -> dict:
        """The method's own health numbers on the monitor's clean images and their `features`."""
        return {}

    def probe_forward(self, images: torch.Tensor) -> None:
        """One forward pass, run on blank images before training to check the image size fits."""
        self.model(images)

    @staticmethod
    def fine_tuning_positions(pos: torch.Tensor, backbone: torch.nn.Module) -> torch.Tensor:
        """The ViT position embeddings fine-tuning starts from after a positions task (patch sorting), which
        never read the learnable ones; by default what they were at the end of pretraining."""
        return pos


def versus_trivial(held: dict, as_ratio: bool = True) -> str:
    """'; a trivial restorer (visible-mean fill) gets 0.15x: the model is not better than it', for the end of a
    report whose ratios are to the corrupted input's error (`as_ratio` False: its MSE, for a report of MSEs);
    '' when the held-out dict has no trivial restorer or nothing was restored (N = 0)."""
    trivial, corrupted = held.get("trivial_mse"), held.get("corrupted_mse")
    if trivial is None or not held.get("restored_mse"):
        return ""
    ratio = f"{trivial / corrupted:.2f}x" if as_ratio and corrupted else f"MSE {trivial:.5f}"
    restored = held["restored_mse"][-1]
    verdict = (f"the model beats it ({restored / trivial:.2f}x its error)" if trivial and restored < trivial
               else "the model is not better than it")
    return f"; a trivial restorer ({held.get('trivial_restorer', 'trivial')}) gets {ratio}: {verdict}"


def figure_numbers(held: dict | None) -> str:
    """'MSE of these 8: corrupted 0.1563, restored 0.0675, trivial 0.0301 (visible-mean fill)' for a figure's
    title; '' without a restoration (N = 0) or numbers."""
    if not held or not held.get("restored_mse"):
        return ""
    line = (f"MSE of these {held['images']}: corrupted {held['corrupted_mse']:.4f}, restored "
            f"{held['restored_mse'][-1]:.4f}")
    if held.get("trivial_mse") is not None:
        line += f", trivial {held['trivial_mse']:.4f} ({held.get('trivial_restorer', 'trivial')})"
    return line


def with_figure_numbers(title: str, held: dict | None) -> str:
    """The figure's numbers on a first line above `title` (the loop appends the epoch to the title)."""
    numbers = figure_numbers(held)
    return f"{numbers}\n{title}" if numbers else title


def add_or_none(total: float | None, part: float | None) -> float | None:
    """A running sum that becomes None, and stays None, once a part is missing."""
    return None if total is None or part is None else total + part


def trivial_sum(task, sample) -> float | None:
    """The summed-over-the-batch MSE (mean per image times images) of the task's trivial restorer, or None."""
    restored = task.trivial_restore(sample)
    if restored is None:
        return None
    return F.mse_loss(restored.float(), sample.target.float()).item() * sample.target.shape[0]
