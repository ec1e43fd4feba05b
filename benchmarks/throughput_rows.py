"""The rows `benchmarks/throughput.py` times: each builds one step (supervised, the paper's bare loop, the corruption
alone, a Pretrainer's step under options), and the tables that pair them (compiled twins, bf16 twins, the GPU
table's rows). `rows(args)` gives those `--only` selects."""

import fnmatch

import torch
import torch.nn.functional as F
from torch import nn

from pretexts.backbones import create_backbone
from pretexts.backbones.factory import set_fused_attention
from pretexts.engine import METHODS, PretrainConfig, Pretrainer
from pretexts.engine.methods.energy.model import create_energy_model
from pretexts.engine.training.config import with_method_args
from pretexts.engine.training.precision import autocast

ENERGY = "energy N=2 exact (Pretrainer.train_step)"
BARE = "paper pseudo code N=2 (bare loop)"
SUPERVISED = "supervised (CE, linear classifier)"
# the exact step's convolutions with autograd's own double backward, and rewritten on first-order kernels
# (engine/modules/second_order.py); the plain exact rows take --double-backward auto
AUTOGRAD = "energy N=2 exact, autograd's double backward"
REWRITTEN = "energy N=2 exact, rewritten double backward"


def supervised(args, device, task, amp: torch.dtype | None = None, compile: str | None = None):
    """Backbone + linear classifier, cross-entropy, AdamW: a supervised step as one would run it (fused attention),
    under `amp` autocast if given, its model through torch.compile with backend `compile` if given."""
    torch.manual_seed(0)
    backbone = set_fused_attention(create_backbone(args.backbone, img_size=args.size), True)
    model = nn.Sequential(backbone, nn.Linear(backbone.num_features, 1000)).to(device)
    if compile:
        model.compile(backend=compile)  # in place, as --compile does a method's backbone
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    labels = torch.randint(1000, (args.batch,), device=device)

    def step(images):
        with autocast(device, amp):
            loss = F.cross_entropy(model(images), labels[: len(images)])
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    return step, model


def bare_loop(args, device, task):
    """The appendix pseudo code, line for line (MSE as eq. 5), on the project's energy model."""
    torch.manual_seed(0)
    model = create_energy_model(args.backbone, img_size=args.size).to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.05)

    def step(images):
        corrupted, loss = task(images).state, 0
        for _ in range(2):
            corrupted = corrupted.detach().requires_grad_(True)
            energy = model.head(model.backbone(model.normalize(corrupted)))
            (grad,) = torch.autograd.grad(energy.sum(), corrupted, create_graph=True)
            corrupted = corrupted - model.alpha * grad
            loss = loss + F.mse_loss(corrupted, images)
        optimizer.zero_grad()
        (loss / 2).backward()
        optimizer.step()

    return step, model


def corruption(args, device, task):
    generator = torch.Generator(device).manual_seed(0)
    return (lambda images: task(images, generator)), None


# eager row -> its compiled twin's builder, given the backend: with --compile each row here gets one (the energy
# method's restoration step through torch.func + torch.compile, engine/methods/energy/compiled.py; the baselines'
# backbone forward, as every other method; the supervised model whole, so the ratios compare like with like)
COMPILED_PAIRS = {
    SUPERVISED: lambda backend: lambda args, device, task: supervised(args, device, task, compile=backend),
    ENERGY: lambda backend: trainer_row(steps=2, compile=backend),
    "energy N=2 finite-difference": lambda backend: trainer_row(
        steps=2, grad_mode="finite-difference", compile=backend
    ),
    "AE baseline (method ae)": lambda backend: trainer_row(method="ae", compile=backend),
    "MAE baseline (method mae)": lambda backend: trainer_row(method="mae", compile=backend),
    # the rows a GPU runs (bf16 autocast, the package's default on CUDA)
    "supervised + bf16 autocast": lambda backend: (
        lambda args, device, task: supervised(args, device, task, torch.bfloat16, compile=backend)
    ),
    "energy N=2 exact + bf16 autocast": lambda backend: trainer_row(steps=2, amp="bf16", compile=backend),
    "energy N=2 finite-difference + bf16 autocast": lambda backend: trainer_row(
        steps=2, grad_mode="finite-difference", amp="bf16", compile=backend
    ),
}
# fp32 row -> its bf16 twin, for the bf16 / fp32 ratios (a ratio to supervised compares rows of one precision)
BF16_PAIRS = {
    SUPERVISED: "supervised + bf16 autocast",
    ENERGY: "energy N=2 exact + bf16 autocast",
    "energy N=2 finite-difference": "energy N=2 finite-difference + bf16 autocast",
    "AE baseline (method ae)": "AE baseline + bf16 autocast",
    "MAE baseline (method mae)": "MAE baseline + bf16 autocast",
    AUTOGRAD: f"{AUTOGRAD} + bf16 autocast",
    REWRITTEN: f"{REWRITTEN} + bf16 autocast",
}


def trainer_row(unfused: bool = False, **overrides):
    """A Pretrainer's step; float32 unless `amp` is given (not the run's "auto", bf16 on CUDA, so that a row's name
    says its precision on every device and compares with the float32 supervised and bare-loop rows)."""

    def build(args, device, task):
        cfg = PretrainConfig(
            **with_method_args(
                dict(  # the energy method's steps and grad_mode into method_args
                    backbone=args.backbone,
                    img_size=args.size,
                    batch_size=args.batch,
                    task=args.task,
                    data="synthetic",
                    workers=0,
                    device=str(device),
                    out=args.out,
                    **{"amp": "off", "compile": None, "tf32": args.tf32 == "on", **overrides},
                )
            )
        )
        trainer = Pretrainer(cfg)
        if unfused:  # what finite differences gain from fused attention
            set_fused_attention(trainer.model.backbone, False)
            trainer.model.math_attention = True
        return trainer.train_step, trainer.model

    return build


def rows(args) -> dict:
    fd = {"grad_mode": "finite-difference"}
    table = {
        SUPERVISED: supervised,
        "supervised + bf16 autocast": lambda args, device, task: supervised(args, device, task, torch.bfloat16),
        "corruption alone": corruption,
        BARE: bare_loop,
        "energy N=1 exact": trainer_row(steps=1),
        ENERGY: trainer_row(steps=2),
        "energy N=1 finite-difference": trainer_row(steps=1, **fd),
        "energy N=2 finite-difference": trainer_row(steps=2, **fd),
        "energy N=2 finite-difference, unfused attention": trainer_row(unfused=True, **fd),
        "energy N=2 exact + grad checkpointing": trainer_row(grad_checkpointing=True),
        "energy N=2 finite-difference + grad checkpointing": trainer_row(grad_checkpointing=True, **fd),
        "energy N=2 exact + channels_last": trainer_row(channels_last=True),
        "energy N=2 exact + bf16 autocast": trainer_row(amp="bf16"),
        AUTOGRAD: trainer_row(double_backward="autograd"),
        REWRITTEN: trainer_row(double_backward="rewritten"),
        f"{AUTOGRAD} + bf16 autocast": trainer_row(double_backward="autograd", amp="bf16"),
        f"{REWRITTEN} + bf16 autocast": trainer_row(double_backward="rewritten", amp="bf16"),
        "energy N=2 finite-difference + bf16 autocast": trainer_row(amp="bf16", **fd),
    }
    METHODS.load()
    for name, label in (("ae", "AE"), ("mae", "MAE")):  # MAE needs a ViT: on other backbones its rows are skipped
        if name in METHODS.table:
            table[f"{label} baseline (method {name})"] = trainer_row(method=name)
            table[f"{label} baseline + bf16 autocast"] = trainer_row(method=name, amp="bf16")
    if args.compile:  # each compiled row beside its eager one (COMPILED_PAIRS); compilation is in the warm-up
        for eager, twin in COMPILED_PAIRS.items():
            if eager in table:
                table[f"{eager} + compile ({args.compile})"] = twin(args.compile)
    patterns = args.only or ["*"]
    return {k: v for k, v in table.items() if any(fnmatch.fnmatch(k, p) for p in patterns)}


PAPER_BACKBONES = ("vit_small", "vit_base", "swin_t", "convnext_t", "resnet50")
PAPER_ROWS = (
    SUPERVISED,
    "supervised + bf16 autocast",
    f"{AUTOGRAD} + bf16 autocast",
    f"{REWRITTEN} + bf16 autocast",
    "energy N=2 finite-difference + bf16 autocast",
)
