"""The energy method (the paper's, `--method energy`): a backbone plus a one-output head is the energy; the
corrupted state is restored by N gradient steps down it (restore.py, double backward or finite
differences) and the restoration error is the loss (eq. 5). With N = 0 the corrupted images are negatives."""

import warnings

import torch
import torch.nn.functional as F
from timm.models.vision_transformer import VisionTransformer
from timm.optim import param_groups_weight_decay

from pretexts.backbones.factory import create_backbone, set_fused_attention
from pretexts.backbones.vit_tokens import (
    AUTO_POSITIONS,
    has_patch_positions,
    resolved_positions,
    sincos_positions,
)
from pretexts.engine.measures.health import brightness, correlation
from pretexts.engine.methods import register_method
from pretexts.engine.methods.base import Method, add_or_none, trivial_sum
from pretexts.engine.methods.energy.grad_modes import refuse_cpu_fp16_double_backward, unsupported_layers
from pretexts.engine.methods.energy.report import RestorationHeldOut, restoration_loss_name, restoration_report
from pretexts.engine.methods.energy.restore import (
    PATCH_CENTRED,
    contrastive_loss,
    restoration_loss,
    restore,
)
from pretexts.engine.methods.report import Figure, with_figure_numbers
from pretexts.engine.methods.states import prepare_task, state_adapter
from pretexts.engine.modules.eval_mode import eval_mode
from pretexts.engine.modules.second_order import rewrite_double_backward, rewritten_layers
from pretexts.errors import ParameterError

from .compiled import CompiledRestore
from .model import create_energy_model
from .params import AUTO_LOSS, ENERGY_PARAMS

# compiled / eager time of the exact step on vit_tiny, random-mask, batch 64 (benchmarks/throughput.py --compile
# inductor on a quiet CPU, docs/performance.md)
COMPILED_VIT_GAIN = 0.85
# alpha below the smallest initial value --alpha allows (1e-6) by orders of magnitude: the step has vanished
VANISHED_ALPHA = 1e-9


@register_method("energy")
class EnergyMethod(Method):
    """The paper's method: a backbone and a one-output linear head form a scalar energy E(x), and the corrupted
    state is restored by N gradient steps down it, x_j = x_{j-1} - alpha dE/dx, with alpha learned; the loss is the
    restored states' error to the clean target (eq. 5), which reaches the backbone through dE/dx (a double backward,
    or finite differences). Its options (`method_args`, each also a `pretexts train` flag): `steps` N (2; 0 trains
    with the corrupted images as negatives), `loss` (auto: patch-centred for a ViT restoring masks, else mse),
    `alpha` and its lr scale, `grad_mode`, and a ViT's `positions` (auto: the fixed sin-cos table).
    """

    summary = "the paper's: restore the corrupted image by N gradient steps down the energy (any backbone)"

    method_params = ENERGY_PARAMS
    # engine/training/recipes.py: Table A trains alpha at the network's lr; the fast start at x400 (docs/recipes.md)
    recipe_defaults = {"paper": {"alpha": 0.1, "alpha_lr_scale": 1.0}, "fast": {"alpha": 0.1, "alpha_lr_scale": 400.0}}
    resume_may_change = frozenset({"grad_mode", "double_backward"})  # the same model (grad modes: to O(fd_delta^2))
    # the collapse warning's way out: black boxes let the scalar energy read the images' brightness instead of
    # their content, which gray boxes take away (docs/results/mask-fills.md)
    shortcut_advice = {
        "fill=black": "with black mask boxes the scalar energy learns the images' brightness "
        "(docs/results/mask-fills.md); --task-arg fill=gray removed that shortcut there",
    }
    compiled: CompiledRestore | None = None  # --compile's restoration step (compiled.py)
    alpha_warned = False  # the vanished-alpha warning is printed once a run
    loss_patch: int | None = None  # the patch-centred loss's patch, set in resolve

    @property
    def loss_name(self) -> str:
        """The restoration error as the run trains it (`--loss` once `resolve` has resolved auto), or with N = 0
        the contrastive loss."""
        if self.args["steps"] == 0:
            return "energy ranking loss: softplus(E(clean) - E(corrupted))"
        if self.args["loss"] == AUTO_LOSS:
            return "restoration error (--loss auto: MSE, or patch-centred MSE for a ViT restoring a mask)"
        state_kind = getattr(self.task, "state_kind", "pixels")
        return restoration_loss_name(self.args["loss"], self.loss_patch, self.args["steps"], state_kind)

    def build_model(self) -> torch.nn.Module:
        return energy_model_for(self.cfg, self.args)

    def resolve(self, model: torch.nn.Module) -> dict:
        """The loss (and its patch), and a ViT's positions, as the run trains them: `auto` picks them per backbone
        and task (the positions when the model is built: they shape it)."""
        self.args["loss"] = resolved_loss(self.args["loss"], model.backbone, self.task)
        self.loss_patch = loss_patch(self.args, model.backbone, self.task, self.cfg.img_size)
        positions = {"positions": self.args["positions"]} if has_patch_positions(model.backbone) else {}
        return {"loss": self.args["loss"], **positions}

    def compiled_gain(self, model: torch.nn.Module) -> float | None:
        """The exact restoration step of a ViT: compiled, faster than eager (COMPILED_VIT_GAIN, docs/performance.md).
        Finite differences and the convolutional backbones were not measured faster."""
        exact = self.args["steps"] and self.args["grad_mode"] == "exact"
        return COMPILED_VIT_GAIN if exact and isinstance(model.backbone, VisionTransformer) else None

    def apply_speedups(self, model: torch.nn.Module) -> torch.nn.Module:
        """With finite differences nothing needs a double backward: fused attention (and compile) are allowed,
        but the estimate needs a smooth, per-image energy. In exact mode the convolutions' double backward is
        rewritten on first-order kernels where `--double-backward` says so (engine/modules/second_order.py)."""
        args = self.args
        if args["grad_mode"] == "finite-difference":
            bad = unsupported_layers(model.backbone)
            if bad:
                raise ParameterError(
                    f"--grad-mode finite-difference needs a smooth, per-image energy, but backbone "
                    f"'{self.cfg.backbone}' has ReLU/max-pool kinks or BatchNorm ({', '.join(bad[:3])}"
                    f"{', ...' if len(bad) > 3 else ''}); use --grad-mode exact, or a LayerNorm+GELU backbone "
                    f"(ViT, Swin, ConvNeXt)."
                )
            set_fused_attention(model.backbone, True)
            model.math_attention = False
        elif args["steps"]:
            refuse_cpu_fp16_double_backward(model.backbone, self.cfg.amp, self.device, self.cfg.backbone)
            layers = rewritten_layers(args["double_backward"], self.device, self.compile_backend)
            rewrite_double_backward(model.backbone, layers)
        return super().apply_speedups(model)

    def compile_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """--compile: the whole restoration step through torch.func + torch.compile (compiled.py), which keeps the
        exact mode's double backward; N = 0 takes no step and compiles the backbone's forward as every method."""
        if self.args["steps"] == 0:
            return super().compile_model(model)
        self.compiled = CompiledRestore(
            model, self.compile_backend, self.args["grad_mode"], self.args["fd_delta"], self.cfg.backbone
        )
        return model

    def loss(self, sample) -> torch.Tensor:
        """The restoration loss of one corrupted batch (paper, eq. 5)."""
        args = self.args
        if args["steps"] == 0:  # the paper's N = 0 point: corrupted images as negatives
            return contrastive_loss(self.model, self.task, sample)
        states = None
        if self.compiled is not None and torch.is_grad_enabled() and self.model.training:
            states = self.compiled(self.task, sample, args["steps"])  # None: it did not compile, run eagerly
        if states is None:
            states = restore(
                self.model, self.task, sample, args["steps"], grad_mode=args["grad_mode"], fd_delta=args["fd_delta"]
            )
        return restoration_loss(states, sample.target, args["loss"], self.loss_patch)

    def held_out_error(self, batches) -> RestorationHeldOut:
        return restoration_error(self.model, self.task, batches, self.args["steps"], self.device, seed=self.cfg.seed)

    def figure(self, images: torch.Tensor) -> Figure:
        # the same seeded corruption as the columns: the title's numbers are the figure's own images
        steps = self.args["steps"]
        error = restoration_error(self.model, self.task, [images], steps, images.device, seed=self.cfg.seed)
        columns = figure_columns(self.model, self.task, images, steps, seed=self.cfg.seed)
        return Figure(columns, with_figure_numbers(f"{self.cfg.task} on {self.cfg.backbone}", error))

    def param_groups(self) -> list:
        """No decay on norms, biases and alpha; alpha's lr scaled by `alpha_lr_scale` (Table A)."""
        alpha = self.model.log_alpha
        groups = param_groups_weight_decay(self.model, self.cfg.weight_decay, no_weight_decay_list=("log_alpha",))
        for group in groups:
            group["params"] = [p for p in group["params"] if p is not alpha]
        return [*groups, {"params": [alpha], "weight_decay": 0.0, "lr_scale": self.args["alpha_lr_scale"]}]

    @property
    def nonfinite_hint(self) -> str:
        """What gives a NaN or inf before any update: the energy's own settings, which scale dE/dx and the step."""
        args = self.args
        head = "PyTorch's init" if args["head_init_std"] is None else f"{args['head_init_std']:g}"
        return (
            f"the energy's settings give it (--energy-scale {args['energy_scale']:g}, --head-init-std {head}, "
            f"--alpha {args['alpha']:g}, --steps {args['steps']}): lower them (defaults: 1, PyTorch's init, 0.1, 2)"
        )

    def step_stats(self) -> dict:
        alpha = self.model.alpha.item()
        # every value stays finite, so no other check would tell; rank 0 alone under torchrun (alpha is replicated)
        dist = torch.distributed
        lead = not (dist.is_available() and dist.is_initialized() and dist.get_rank())
        if alpha < VANISHED_ALPHA and not self.alpha_warned and lead:
            self.alpha_warned = True
            warnings.warn(
                f"alpha, the restoration step size, fell to {alpha:.3g} (below {VANISHED_ALPHA:g}): the restoration "
                "no longer moves the image, so the run learns nothing; lower --lr or --alpha-lr-scale (alpha's lr is "
                f"{self.args['alpha_lr_scale']:g} x --lr).",
                stacklevel=2,
            )
        return {"alpha": alpha}

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


def energy_model_for(cfg, args: dict) -> torch.nn.Module:
    """The energy model a run's config and parsed method arguments describe: what training builds and what
    `restore` and `energy` rebuild from its checkpoint, from one list of the options that shape it. `positions`
    auto is resolved into `args` (config.json records what ran)."""
    model = create_energy_model(
        cfg.backbone,
        img_size=cfg.img_size,
        alpha=args["alpha"],
        head_init_std=args["head_init_std"],
        energy_scale=args["energy_scale"],
        positions=args["positions"],
        global_pool=cfg.global_pool,
    )
    args["positions"] = model.positions
    return model


def resolved_loss(loss: str, backbone: torch.nn.Module, task) -> str:
    """`loss`, with auto resolved: patch-centred for a ViT restoring the boxes of a task that declares `masking`
    (the masks, and a mixture of masks alone; a colour shift of a patch earns nothing, as with MAE's normalised
    targets; docs/results/representation.md), mse for the rest: on a CNN the centred loss let the energy learn the
    images' brightness, and colorization's error is the colour that centring drops."""
    if loss != AUTO_LOSS:
        return loss
    return PATCH_CENTRED if isinstance(backbone, VisionTransformer) and task.masking else "mse"


def resolve_auto(backbone: str, img_size: int, task) -> dict:
    """What loss=auto and positions=auto resolve to for a run of `backbone` (a name) on `task`, without building
    its weights."""
    with torch.device("meta"):
        built = create_backbone(backbone, img_size=img_size)
    return {"loss": resolved_loss(AUTO_LOSS, built, task), "positions": resolved_positions(AUTO_POSITIONS, built)}


def pixel_states_only(task, option: str, what: str, instead: str) -> None:
    """Refuse `--method-arg option` for a task whose state is no image (patch sorting's positions)."""
    if task.state_kind != "pixels":
        raise ParameterError(
            f"--method-arg {option} {what}, but task '{task.name}' restores a {task.state_kind} state; use "
            f"{instead} with it."
        )


def loss_patch(args: dict, backbone: torch.nn.Module, task, img_size: int) -> int | None:
    """The patch-centred loss's patch: `loss_patch`, else the ViT's patch (what MAE normalises over), else 8 px;
    None for the other losses."""
    if args["loss"] != PATCH_CENTRED:
        return None
    pixel_states_only(task, f"loss={PATCH_CENTRED}", "measures a restored image", "loss=mse")
    embed = getattr(backbone, "patch_embed", None)
    patch = args["loss_patch"] or (embed.patch_size[0] if embed is not None else 8)
    if img_size % patch:
        raise ParameterError(
            f"--method-arg loss_patch={patch} must divide the image size {img_size} (the patch-centred loss "
            f"averages the error over whole patches); give loss_patch=N with N dividing {img_size}."
        )
    return patch


def restoration_error(model, task, batches, steps: int, device, seed: int = 0) -> RestorationHeldOut:
    """Pixel (or state) MSE to the target of the corrupted input, of each restored step and of the task's
    trivial restorer (where the task has one); with N = 0 how often the energy ranks clean below corrupted.
    For a masking task `extra['known_kept_mse']` is the last step's with the known pixels put back (`keep_known`).

    `batches` yields float [B,3,H,W] in [0,1]. The corruption is seeded, so two models are
    compared on the same corrupted images; the task is prepared for the model first (`prepare_task`), as a run
    prepares it.
    """
    if isinstance(batches, torch.Tensor):
        raise ParameterError(
            f"restoration_error takes an iterable of image batches, got one tensor {tuple(batches.shape)}; "
            f"pass [images] for a single batch."
        )
    task = prepare_task(task, model)
    generator = torch.Generator(device=device).manual_seed(seed)
    corrupted, restored, count = 0.0, [0.0] * steps, 0
    ranked, gap, trivial = 0.0, 0.0, 0.0
    kept = 0.0 if steps else None  # None once a batch has no known pixels
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
            if kept is not None:
                kept = add_or_none(kept, kept_sum(sample, states[-1]))
            if steps == 0:  # N = 0 restores nothing: how well the energy ranks clean below corrupted
                energy = state_adapter(task, model).energy
                difference = energy(sample, sample.state) - energy(sample, sample.target)
                ranked += (difference > 0).sum().item()
                gap += difference.sum().item()
            count += n
    if count == 0:
        raise ParameterError("restoration_error got no images: give it at least one batch [B, 3, H, W], e.g. [images].")
    extra = {"ranked_right": ranked / count, "energy_gap": gap / count} if steps == 0 else {}
    if kept is not None:
        extra["known_kept_mse"] = kept / count
    return restoration_report(
        count,
        corrupted / count,
        [r / count for r in restored],
        None if trivial is None else trivial / count,
        None if trivial is None else task.trivial_restorer,
        "restoration MSE" if task.state_kind == "pixels" else "position-embedding MSE",
        **extra,
    )


def known_pixels(sample) -> torch.Tensor | None:
    """[B, 1, H, W], True on the pixels the corruption left as they were, or None where the task names none.

    A masking task says it in `info["mask"]` ([B, H, W], True on the masked pixels). The paper restores every
    pixel and trains on the whole image (eq. 5), so restoration and loss never use this; only the figure and
    the report do, to show and measure the restoration with the known pixels put back, as inpainting does.
    """
    mask = sample.info.get("mask") if isinstance(sample.info, dict) else None
    state = sample.state
    if (
        not isinstance(mask, torch.Tensor)
        or mask.dtype != torch.bool
        or state.ndim != 4
        or mask.shape != (state.shape[0], *state.shape[2:])
    ):
        return None
    return ~mask.unsqueeze(1)


def keep_known(sample, state: torch.Tensor) -> torch.Tensor | None:
    """`state` with the known pixels put back from the corrupted input (`known_pixels`), or None."""
    known = known_pixels(sample)
    return None if known is None else torch.where(known, sample.state.to(state.dtype), state)


def kept_sum(sample, state: torch.Tensor) -> float | None:
    """The summed-over-the-batch MSE of `state` with the known pixels put back, or None."""
    restored = keep_known(sample, state)
    if restored is None:
        return None
    return F.mse_loss(restored.float(), sample.target.float()).item() * sample.target.shape[0]


def figure_columns(model, task, images: torch.Tensor, steps: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """{'corrupted': ..., 'step 1': ..., ..., 'original': ...} as images for `restoration_figure`; for a masking task
    also 'step N, known pixels kept' (before 'original'): the last step with its unmasked pixels put back. The task
    is prepared for the model first (`prepare_task`)."""
    task = prepare_task(task, model)
    generator = torch.Generator(device=images.device).manual_seed(seed)
    with eval_mode(model), torch.no_grad():
        sample = task(images, generator)
        states = restore(model, task, sample, steps)
    columns = {"corrupted": task.preview(sample, sample.state)}
    for j, state in enumerate(states, 1):
        columns[f"step {j}"] = task.preview(sample, state)
    kept = keep_known(sample, states[-1]) if states else None
    if kept is not None:  # the raw steps change the known pixels too (the paper restores all of them)
        columns[f"step {steps}, known pixels kept"] = task.preview(sample, kept)
    columns["original"] = images
    return columns
