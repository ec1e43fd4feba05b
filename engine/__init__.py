"""The engine, in rooms: `methods/` (what is learned: energy, ae, mae), `training/` (the method-agnostic loop,
config, checkpoints), `data/` (sources, loaders, the embedded sample) and `evaluation/` (fine-tuning, probes,
kNN, segmentation, export). The names below are the Python API."""
from .training.checkpoint import atomic_save, load_checkpoint
from .training.config import PretrainConfig
from .methods import METHODS, Method, list_methods, register_method
from .methods.restore import restoration_loss, restore
from .methods.energy import EnergyMethod, figure_columns, restoration_error
from .methods.autoencoder import AutoencoderMethod
from .methods.mae import MAEMethod
from .training.loop import Pretrainer, format_held_out, pretrain
from .evaluation.energy_histogram import energy_histogram
from .evaluation.export import export_backbone
from .evaluation.finetune import Finetuner, finetune
from .evaluation.finetune_config import FinetuneConfig
from .evaluation.knn import knn_predict
from .evaluation.probe import ProbeConfig, run_probe

__all__ = ["restore", "restoration_loss", "PretrainConfig", "Pretrainer", "pretrain", "format_held_out",
           "METHODS", "Method", "list_methods", "register_method", "EnergyMethod", "AutoencoderMethod", "MAEMethod",
           "restoration_error", "figure_columns", "atomic_save", "load_checkpoint",
           "FinetuneConfig", "Finetuner", "finetune", "ProbeConfig", "run_probe", "knn_predict",
           "export_backbone", "energy_histogram"]
