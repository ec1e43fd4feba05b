"""`Method`: what a pretraining method owns. The loop (engine.training.loop.Pretrainer) runs every method
the same way: `setup()` once, then per step corrupt -> loss -> optimiser step, and at the end of an
epoch the held-out report and the figure. A method is one subclass in one file, `@register_method(name)`."""

import sys

import torch
import torch.nn.functional as F
from timm.optim import param_groups_weight_decay

from pretexts.backbones.factory import set_grad_checkpointing
from pretexts.backbones.normalisation import normalisation
from pretexts.engine.methods.report import Figure, HeldOut
from pretexts.engine.methods.states import state_adapter
from pretexts.errors import ParameterError, suggest


class Method:
    """Override `build_model`, `loss`, `held_out_error` and `figure`; the rest has defaults.

    The loop (`pretexts.engine.Pretrainer`) builds the method from the run's config, then `build()`s the model
    (`build_model`, then `resolve` of its `auto` options), decides `--compile` from the method's `compiled_gain` and
    the run's length, and `prepare`s the model (`apply_speedups`, `compile_model`). Per step it runs `corrupt` ->
    `loss` -> an optimiser step over `param_groups()`, logging `step_stats()`; it draws `figure` at the end of an
    epoch and prints `held_out_error` at the end of the run, and the monitor measures `features` and
    `monitor_scalars`. `@register_method(name)` (from `pretexts.engine`) makes it `pretexts train --method NAME`;
    its `summary`, else its docstring's first paragraph, is its line in `pretexts list --methods`.

    Args:
        cfg (PretrainConfig): The run's `PretrainConfig`, kept as `self.cfg` (backbone, img_size, seed, ...).
        task (Pretext): The `Pretext` that `cfg.task` and `cfg.task_args` name, kept as `self.task`.
        device: Where the model, the images and the step's generator live, kept as `self.device`.

    Attributes:
        summary: One line for `pretexts list --methods`; empty: the docstring's first paragraph.
        method_params: Its own options, name -> `pretexts.Param`: each is `--method-arg KEY=VALUE` and, where no
            config field has the name, its own `pretexts train --key` option; converted and checked into
            `self.args`.
        recipe_defaults: Recipe name -> {param: default}, where a recipe changes a param's default.
        resume_may_change: The params a `--resume` may change (they do not change the run).
        figure_name: The epoch figures are `FIGURE_NAME_epochNNN.png`.
        loss_name: What `loss` measures, in a few words with its space where it matters (the y axis of
            loss_curve.png): "training loss" unless the method names it; a property where the options decide it.
        uses_task: False for a method that corrupts its own way and ignores `--task` (MAE's and SimMIM's
            masks); `pretexts compare` then trains it once, not once per task, and `pretexts train` names no task.
        shortcut_advice: The shortcuts the method is known to take, for the monitor's collapse warning: a task
            argument as "ARG=VALUE" (e.g. "fill=black"), or "*" for any run, -> what it learns there and the way
            out. The first that matches the run's task is printed; none: a neutral line.
        args: The options as resolved by `parse_args`: given, else the recipe's default, else the declared one.
        model: The module `setup()` built (None before); its `backbone.*` weights are what fine-tuning,
            probing and export take.

    Examples:
        >>> import torch
        >>> from pretexts import create_pretext
        >>> from pretexts.engine import METHODS, PretrainConfig
        >>> cfg = PretrainConfig(method="ae", backbone="vit_tiny", img_size=32, method_args={"decoder_depth": 1})
        >>> method = METHODS.get(cfg.method)(cfg, create_pretext(cfg.task), torch.device("cpu"))
        >>> method.args["decoder_depth"], method.corruption()
        (1, "'random-mask'")
        >>> model = method.setup()  # build, then prepare (eager), as the loop does once; then, each step:
        >>> sample = method.corrupt(torch.rand(2, 3, 32, 32), torch.Generator().manual_seed(0))
        >>> method.loss(sample).shape
        torch.Size([])
        >>> method.features(torch.rand(2, 3, 32, 32)).shape  # vit_tiny's 192 pooled features
        torch.Size([2, 192])
    """

    summary = ""  # one line for `pretexts list --methods`
    # its own options: name -> pretexts.Param; each is `--method-arg KEY=VALUE` and, where no config field
    # has the name, its own `pretexts train --key` option (pretexts/cli/method_options.py)
    method_params: dict = {}
    recipe_defaults: dict = {}  # recipe name -> {param: default} where a recipe changes a param's default
    resume_may_change: frozenset = frozenset()  # params a `--resume` may change (they do not change the run)
    figure_name = "restoration"  # the epoch figures are FIGURE_NAME_epochNNN.png
    loss_name = "training loss"  # what `loss` measures, loss_curve.png's y axis; methods name theirs
    uses_task = True  # False: it corrupts its own way (MAE's, SimMIM's masks) and ignores --task
    shortcut_advice: dict = {}  # "ARG=VALUE" of the task (or "*") -> a known shortcut and the way out
    compile_backend: str | None = None  # torch.compile's backend the loop chose (`prepare`); None: eager
    nonfinite_hint: str | None = None  # what gives a NaN before any update (the model's own settings); None: generic

    def __init__(self, cfg, task, device: torch.device):
        self.cfg, self.task, self.device = cfg, task, device
        self.args = self.parse_args(cfg)
        self.model: torch.nn.Module | None = None  # built by `setup`

    @classmethod
    def parse_args(cls, cfg) -> dict:
        """`cfg.method_args` checked against `method_params` and converted; defaults (the recipe's where it
        names one, `recipe_defaults`) filled in. A param declared with default None may stay None.

        Args:
            cfg (PretrainConfig): The run's config.

        Returns:
            Param name -> value, every declared param present.

        Raises:
            ParameterError: A key the method does not declare, or a value its `Param` refuses.
        """
        unknown = [k for k in cfg.method_args if k not in cls.method_params]
        if unknown:
            raise ParameterError(
                f"method '{cfg.method}' has no argument '{unknown[0]}'; its arguments: "
                f"{', '.join(cls.method_params) or 'none'}.{suggest(unknown[0], cls.method_params)}"
            )
        defaults = {k: p.default for k, p in cls.method_params.items()}
        defaults.update(cls.recipe_defaults.get(getattr(cfg, "recipe", None), {}))
        given = {k: cfg.method_args.get(k, defaults[k]) for k in cls.method_params}
        return {
            k: None
            if value is None and defaults[k] is None
            else cls.method_params[k].convert(f"method {cfg.method}", k, value)
            for k, value in given.items()
        }

    def setup(self, compile_backend: str | None = None) -> torch.nn.Module:
        """`build` then `prepare`, in one call (the loop decides `--compile` between the two, from the built model).
        Not meant to be overridden."""
        return self.prepare(self.build(), compile_backend)

    def build(self) -> torch.nn.Module:
        """`build_model` on the method's device with its `auto` options resolved (`resolve`; what they resolved
        to is `self.resolved`, and `self.given` names those the run set to that value, not auto). Not meant to be
        overridden."""
        asked = dict(self.args)  # before build_model: it may resolve an option that shapes the model
        model = self.build_model().to(self.device)
        self.resolved = self.resolve(model)
        self.given = {k for k, v in self.resolved.items() if asked.get(k) == v}
        return model

    def prepare(self, model: torch.nn.Module, compile_backend: str | None) -> torch.nn.Module:
        """The run's speedups on the built model (`compile_backend`: torch.compile's, None: eager) and the task
        bound to it; the loop calls it once, before the optimiser (and DDP) see the model. Not meant to be
        overridden."""
        self.compile_backend = compile_backend
        self.model = self.apply_speedups(model)
        self.task = state_adapter(self.task, self.model).prepare()
        return self.model

    def resolve(self, model: torch.nn.Module) -> dict:
        """Resolve the method's `auto` options against the built `model` and the task, into `self.args`.

        Returns:
            Option -> what the run trains with, for the start line and the record (the energy method's loss and a
            ViT's positions); by default nothing.
        """
        return {}

    def compiled_gain(self, model: torch.nn.Module) -> float | None:
        """The compiled / eager time of this method's step on `model`'s backbone on the CPU where it was measured
        faster compiled (engine/training/compile_choice.py); None, the default: `--compile auto` leaves it eager."""
        return None

    def apply_speedups(self, model: torch.nn.Module) -> torch.nn.Module:
        """The config's memory-for-time options: gradient checkpointing, channels_last, torch.compile (of the
        backbone, in place: the state_dict keeps its keys). A method whose loss needs more than a first-order
        backward checks here what it cannot run with."""
        cfg = self.cfg
        backbone = getattr(model, "backbone", model)
        if cfg.grad_checkpointing:
            set_grad_checkpointing(backbone, True)
        if cfg.channels_last:
            model = model.to(memory_format=torch.channels_last)
        if self.compile_backend:
            model = self.compile_model(model)
        return model

    def compile_model(self, model: torch.nn.Module) -> torch.nn.Module:
        """--compile: the backbone's forward through torch.compile (in place: the state_dict keeps its keys). A
        method whose loss needs a double backward compiles its own step instead (the energy method)."""
        compile_forward(getattr(model, "backbone", model), self.compile_backend, self.cfg.backbone)
        return model

    def build_model(self) -> torch.nn.Module:
        """The trained module; its `backbone.*` weights are what fine-tuning, probing and export take.

        Build the backbone from `self.cfg.backbone` at `self.cfg.img_size` (`pretexts.create_backbone`). Give the
        module `mean` and `std` buffers `(1, 3, 1, 1)` where it normalises its input itself (as `EnergyModel`
        does): the default `features` normalises with them, else with the backbone's own normalisation.

        Returns:
            The module, on the CPU; `setup` moves it to `self.device`.
        """
        raise NotImplementedError

    def corruption(self) -> str:
        """What the run learns to undo, for the start line ("pretraining vit_tiny on ... with data ...").

        Returns:
            The task's name in quotes by default; a method that corrupts its own way says what it does (by
            default that it ignores the task).
        """
        return f"'{self.cfg.task}'" if self.uses_task else f"{self.cfg.method}'s own corruption (--task unused)"

    def corrupt(self, images: torch.Tensor, generator: torch.Generator):
        """The step's sample from clean images [B,3,H,W] in [0,1]; the task's corruption unless the method
        has its own (MAE masks inside its model).

        Args:
            images: The step's clean batch, on `self.device`.
            generator: The step's generator, on `self.device`, seeded by (seed, step, rank): draw every random
                number from it (with `device=images.device`), so a resumed run draws the same corruptions.

        Returns:
            (Corrupted): What `loss` takes: the task's `Corrupted` by default; a method with its own corruption
                returns whatever its `loss` reads.

        Shape:
            - images: `(B, 3, H, W)` float in [0, 1].
        """
        return self.task(images, generator)

    def loss(self, sample) -> torch.Tensor:
        """The scalar loss of one corrupted sample; the loop runs it under autocast (and inside DDP's forward).

        Args:
            sample (Corrupted): What `corrupt` returned.

        Returns:
            A scalar tensor the loop back-propagates.
        """
        raise NotImplementedError

    def held_out_error(self, batches) -> HeldOut:
        """The report on the held-out `batches` (seeded): the error of the corrupted input and of what the method
        restored, and of the task's trivial restorer (`Pretext.trivial_restore`) where it has one.

        Args:
            batches (Iterable[Tensor]): Yields the same seeded held-out images every time, float `(B, 3, H, W)`
                in [0, 1] on `self.device`. The loop calls it with the model in training mode: measure in eval
                mode (`with eval_mode(self.model):`, from `pretexts.engine.modules.eval_mode`), which puts it back.

        Returns:
            A `HeldOut` in the method's own words: `format()` is the line `pretexts train` prints, `to_dict()`
            goes to results.json.
        """
        raise NotImplementedError

    def figure(self, images: torch.Tensor) -> Figure:
        """The epoch figure of `images`: its columns and its title.

        Args:
            images: The figure's held-out images, float `(B, 3, H, W)` in [0, 1] on `self.device`.

        Returns:
            A `Figure`: column name -> images `(B, 3, H, W)` in [0, 1], left to right, and the title (where the
            method measured the figure's own images, with their numbers: `with_figure_numbers`).
        """
        raise NotImplementedError

    def default_title(self) -> str:
        """ "METHOD: TASK on BACKBONE", a figure's title by default; "METHOD on BACKBONE" where the method ignores
        the task (`uses_task` False)."""
        task = f": {self.cfg.task}" if self.uses_task else ""
        return f"{self.cfg.method}{task} on {self.cfg.backbone}"

    def param_groups(self) -> list:
        """The optimiser's parameter groups: weight decay on all but norms and biases (timm's split)."""
        return param_groups_weight_decay(self.model, self.cfg.weight_decay)

    def step_stats(self) -> dict:
        """Scalars logged (and shown in the progress bar) with each step's loss (the energy method's alpha)."""
        return {}

    def features(self, images: torch.Tensor) -> torch.Tensor:
        """Pooled backbone features [B, D] of clean images in [0, 1] (what the monitor measures during training).

        The images are normalised with the model's `mean` and `std` where it has them (`build_model`), else
        with the backbone's own normalisation, then `model.backbone` pools them.

        Args:
            images: Clean images on `self.device`.

        Returns:
            The features.

        Shape:
            - images: `(B, 3, H, W)` float in [0, 1].
            - Returns: `(B, D)`, D the backbone's pooled width (`pooled_width`: timm's `head_hidden_size` where
              it has one, else `num_features`).
        """
        model = self.model
        mean, std = (
            (model.mean, model.std)
            if hasattr(model, "mean")
            else (torch.tensor(v, device=images.device).view(1, -1, 1, 1) for v in normalisation(model.backbone))
        )
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


def resolved_line(method: Method) -> str | None:
    """The start line naming what the method's `auto` options resolved to (`Method.resolve`), and the value of each
    the run set itself (given, or recorded by the run it resumes); None if nothing."""
    if not method.resolved:
        return None
    parts, kept = [], "as the resumed run has {}" if getattr(method.cfg, "resume", None) else "as given"
    for names, how in (
        ([k for k in method.resolved if k in method.given], kept),
        ([k for k in method.resolved if k not in method.given], "auto picks {} by backbone and task"),
    ):
        if names:
            options = ", ".join("--" + k.replace("_", "-") for k in names)
            how = how.format("it" if len(names) == 1 else "them")
            parts.append(f"{', '.join(f'{k} {method.resolved[k]}' for k in names)} ({options}; {how})")
    return f"{method.cfg.method}: {', '.join(parts)}"


def add_or_none(total: float | None, part: float | None) -> float | None:
    """A running sum that becomes None, and stays None, once a part is missing."""
    return None if total is None or part is None else total + part


def trivial_sum(task, sample) -> float | None:
    """The summed-over-the-batch MSE (mean per image times images) of the task's trivial restorer, or None."""
    restored = task.trivial_restore(sample)
    if restored is None:
        return None
    return F.mse_loss(restored.float(), sample.target.float()).item() * sample.target.shape[0]


def compile_forward(module: torch.nn.Module, backend: str, name: str, entries: tuple = ()) -> None:
    """torch.compile, in place, what methods call on a timm backbone: `forward_features` and
    `forward_intermediates` (`forward` runs through the first), or `forward` where it has neither; `entries` names
    other methods instead (MAE's encoder and decoder). Each call lowers its backward at once, so a backbone that
    does not compile says so in one line, at the call that compiles, and runs eagerly from then on."""
    names = list(entries) or [n for n in ("forward_features", "forward_intermediates") if hasattr(module, n)]
    names = names or ["forward"]
    eager = {n: getattr(module, n) for n in names}

    def guarded(entry: str):
        compiled = torch.compile(eager[entry], backend=backend)

        def call(*args, **kwargs):
            if module.__dict__.get(entry) is not call:  # an earlier failure restored the eager methods
                return eager[entry](*args, **kwargs)
            try:
                with torch._functorch.config.patch(force_non_lazy_backward_lowering=True):
                    return compiled(*args, **kwargs)
            except Exception as err:  # noqa: BLE001 - any compiler failure: one line, then eager
                for n in names:
                    module.__dict__.pop(n, None)
                print(
                    f"--compile: backbone '{name}' did not compile ({first_line(err)}); it runs eagerly.",
                    file=sys.stderr,
                    flush=True,
                )
                return eager[entry](*args, **kwargs)

        return call

    for entry in names:
        setattr(module, entry, guarded(entry))


def first_line(err: Exception) -> str:
    """`Type: the first line of the message`, short enough for a one-line note."""
    return f"{type(err).__name__}: {(str(err).strip().splitlines() or [''])[0][:200]}"
