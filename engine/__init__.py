"""Restoration, the pretraining loop, data, checkpoints and figures."""
from .checkpoint import atomic_save, load_checkpoint
from .config import PretrainConfig
from .evaluate import figure_columns, restoration_error
from .methods import TRAINERS, create_trainer, list_methods, register_method
from .pretrain import Pretrainer, format_held_out, pretrain
from .restore import restoration_loss, restore
from .autoencoder import AutoencoderTrainer  # registers method "ae"
from .mae import MAETrainer  # registers method "mae"
from .energy_histogram import energy_histogram
from .export import export_backbone
from .finetune import Finetuner, finetune
from .finetune_config import FinetuneConfig
from .knn import knn_predict
from .probe import ProbeConfig, run_probe

__all__ = ["restore", "restoration_loss", "PretrainConfig", "Pretrainer", "TRAINERS", "create_trainer", "list_methods",
           "register_method", "pretrain", "format_held_out",
           "restoration_error", "figure_columns", "atomic_save", "load_checkpoint",
           "AutoencoderTrainer", "MAETrainer", "FinetuneConfig", "Finetuner", "finetune", "ProbeConfig", "run_probe", "knn_predict",
           "export_backbone", "energy_histogram"]
