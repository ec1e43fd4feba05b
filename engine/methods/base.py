"""`Method`: what a pretraining method owns. The loop (engine.training.loop.Pretrainer) runs every method
the same way: build the model once, then per step corrupt -> loss -> optimiser step, and at the end of an
epoch the held-out error and the figure. A method is one subclass in one file, `@register_method(name)`."""
import torch
from timm.optim import param_groups_weight_decay

from pretexts.errors import ParameterError


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
        """{'corrupted_mse', 'restored_mse': [...], 'images', ...} on the held-out `batches` (seeded)."""
        raise NotImplementedError

    def figure_columns(self, images: torch.Tensor) -> dict:
        """Column name -> images [B,3,H,W] for the restoration figure of `images`."""
        raise NotImplementedError

    def figure_title(self) -> str:
        return f"{self.cfg.method}: {self.cfg.task} on {self.cfg.backbone}"

    def param_groups(self) -> list:
        """The optimiser's parameter groups: weight decay on all but norms and biases (timm's split)."""
        return param_groups_weight_decay(self.model, self.cfg.weight_decay)

    def step_stats(self) -> dict:
        """Scalars logged with each step's loss (the energy method's alpha)."""
        return {}

    def probe_forward(self, images: torch.Tensor) -> None:
        """One forward pass, run on blank images before training to check the image size fits."""
        self.model(images)

    @staticmethod
    def fine_tuning_positions(pos: torch.Tensor, backbone: torch.nn.Module) -> torch.Tensor:
        """The ViT position embeddings fine-tuning starts from after a positions task (patch sorting), which
        never read the learnable ones; by default what they were at the end of pretraining."""
        return pos
