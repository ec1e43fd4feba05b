"""The figures are drawn without pyplot: a run, an energy histogram, a segmentation figure and a comparison's plot
leave the caller's matplotlib backend (a notebook's inline one) as it was and open no figure of the caller's pyplot,
and still write their PNGs at the sizes they always had. The loss curve's running mean costs one pass."""

import json
import subprocess
import sys

import torch
from PIL import Image

from pretexts.engine.training.figures import running_mean

SCRIPT = """
import json, sys
import matplotlib
matplotlib.use("svg")  # the caller's backend: anything but Agg
import matplotlib.pyplot as plt
import torch
torch.set_num_threads(1)
import pretexts
from pretexts.engine.compare import report
from pretexts.engine.evaluation.segmentation.figure import save_figure

out = sys.argv[1]
pretexts.pretrain(pretexts.PretrainConfig(
    backbone="test_convnext", out=out + "/run", epochs=1, batch_size=8, max_steps_per_epoch=2, eval_images=8,
    figure_images=2, monitor_every=1, monitor_images=8, workers=0, quiet=True))
pretexts.energy_histogram(out + "/run/checkpoint.pt", out + "/energy.png", images=4, steps=1, workers=0, device="cpu")
maps = torch.randint(0, 3, (2, 16, 16))
save_figure(torch.rand(2, 3, 16, 16), maps, maps, out + "/segmentation.png", title="title")
row = dict(budget=5.0, unit="minutes", minutes=5.0, seeds=3, steps=300, knn=(30.0, 1.0), knn_std=(31.0, 1.0),
           finetune=None, finetune_epochs=[], finetune_precision=[], held_out=(0.6, 0.01), top_share=0.5)
report.plot([dict(row, arm="ae", linear=(37.4, 0.6)), dict(row, arm="mae", linear=(30.0, 0.5))], "linear",
            out + "/compare.png", "title")
print(json.dumps({"backend": matplotlib.get_backend(), "open_figures": plt.get_fignums()}))
"""


def test_figures_leave_the_callers_backend_and_pyplot_alone(tmp_path):
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(tmp_path)], capture_output=True, text=True, timeout=600, check=True
    )
    state = json.loads(done.stdout.strip().splitlines()[-1])
    assert state == {"backend": "svg", "open_figures": []}
    sizes = {  # as pyplot drew them: figsize x dpi 100
        "run/loss_curve.png": (600, 350),
        "run/monitor.png": (1360, 300),
        "run/restoration_epoch001.png": (800, 380),
        "energy.png": (700, 350),
        "segmentation.png": (600, 490),
        "compare.png": (1140, 220),
    }
    for name, size in sizes.items():
        with Image.open(tmp_path / name) as image:
            assert (image.format, image.size) == ("PNG", size), name
            assert image.convert("L").getextrema()[0] < 128, name  # something dark drawn: text, lines


def test_the_running_mean_is_the_windows_mean():
    losses = torch.rand(97, generator=torch.Generator().manual_seed(0)).add(0.01).tolist()
    for k in (1, 5, 20, 97):
        windows = torch.tensor(losses).unfold(0, k, 1).mean(1).tolist()  # the mean of each window, one at a time
        got = running_mean(losses, k)
        assert len(got) == len(windows) == len(losses) - k + 1
        torch.testing.assert_close(torch.tensor(got), torch.tensor(windows), rtol=1e-6, atol=0)
