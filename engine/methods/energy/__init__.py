"""The energy method (the paper's, `--method energy`), whole: the energy model (model.py), restoration by
gradient steps down it (restore.py), how the inner gradient is taken (grad_modes.py), the method the loop
runs with its options (method.py), and its held-out report (report.py)."""

from .method import EnergyMethod, figure_columns, restoration_error
from .model import EnergyModel, create_energy_model

__all__ = ["EnergyMethod", "EnergyModel", "create_energy_model", "figure_columns", "restoration_error"]
