"""The engine, in rooms: `modules/` (nn blocks methods and evaluation share: features, dense heads, decoders),
`measures/` (representation health, kNN), `data/` (sources, loaders, the embedded sample), `methods/` (what is
learned: energy, ae, mae, simmim), `training/` (the method-agnostic loop, config, checkpoints) and `evaluation/`
(fine-tuning, probes, segmentation, export). The names below are the Python API; each loads its module on first use,
so the CLI can read the config dataclasses without importing torch."""

from importlib import import_module

API = {
    "atomic_save": "training.checkpoint",
    "load_checkpoint": "training.checkpoint",
    "PretrainConfig": "training.config",
    "Pretrainer": "training.loop",
    "pretrain": "training.loop",
    "METHODS": "methods",
    "Method": "methods",
    "list_methods": "methods",
    "register_method": "methods",
    "restore": "methods.energy.restore",
    "restoration_loss": "methods.energy.restore",
    "EnergyModel": "methods.energy.model",
    "create_energy_model": "methods.energy.model",
    "EnergyMethod": "methods.energy",
    "restoration_error": "methods.energy",
    "figure_columns": "methods.energy",
    "prepare_task": "methods.states",
    "load_energy_run": "evaluation.from_checkpoint",
    "EnergyRun": "evaluation.from_checkpoint",
    "HeldOut": "methods.report",
    "Figure": "methods.report",
    "AutoencoderMethod": "methods.autoencoder",
    "MAEMethod": "methods.mae",
    "SimMIMMethod": "methods.simmim",
    "FinetuneConfig": "evaluation.finetune_config",
    "Finetuner": "evaluation.finetune",
    "finetune": "evaluation.finetune",
    "ProbeConfig": "evaluation.probe_config",
    "run_probe": "evaluation.probe",
    "knn_predict": "measures.knn",
    "export_backbone": "evaluation.export",
    "energy_histogram": "evaluation.energy_histogram",
}
__all__ = list(API)


def __getattr__(name: str):
    if name not in API:
        raise AttributeError(f"module 'pretexts.engine' has no attribute '{name}'")
    return getattr(import_module(f"pretexts.engine.{API[name]}"), name)
