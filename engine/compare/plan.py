"""What a comparison will cost, said before it starts and corrected as it runs.

The estimate (before the first cell) is modelled, and says so: each pretrained cell spends its budget on the
training steps, converted to wall-clock seconds by the wall / CPU-time ratio of one timed training step of the
backbone (on a CPU the budget is process CPU time, which runs faster than the wall with several threads and
slower on a loaded machine); every cell adds a fixed cost: building the model, the forward passes of its probes
over train/ and val/ (and the monitor's and held-out images), and its fine-tune's epochs, priced from that timed
step and one timed forward batch. After each cell the ETA is the pace so far: the mean wall time of the cells of
each kind (pretrained, random init) already run, times the cells of that kind left."""

import time
from dataclasses import dataclass, field

import torch

# images the pretraining run forwards besides its steps: the monitor at its first and last measure (256 held-out
# and 256 training images each) and the held-out error at the end (256 images, restored then scored)
RUN_EXTRA_IMAGES = 2 * 512 + 2 * 256
# and each pretrained point, as it is scored, measures its snapshot the same way in the run rebuilt once a cell (one
# monitor measure and the held-out error: engine/compare/point_measures.py)
POINT_EXTRA_IMAGES = 512 + 256


@dataclass
class Costs:
    """Measured in this process, just before the run: seconds per image and the wall / CPU-time ratio."""

    forward: float  # wall seconds per image, inference
    step: float  # wall seconds per image, forward + backward + optimiser step
    build: float  # wall seconds to build the backbone
    wall_per_cpu: float  # wall seconds per process-CPU second during the timed step


def measure_costs(model: torch.nn.Module, img_size: int, batch_size: int, build: float) -> Costs:
    """Times one forward batch and one training step of `model` (after one untimed of each: the first allocates);
    `build` is the wall seconds its construction took."""
    target = next(model.parameters()).device
    images = torch.randn(min(batch_size, 32), 3, img_size, img_size, device=target)
    optimizer = torch.optim.AdamW(model.parameters())

    def step():
        optimizer.zero_grad(set_to_none=True)
        model(images).float().pow(2).mean().backward()
        optimizer.step()

    def forward():
        with torch.no_grad():
            model(images)

    timings = []
    for work in (forward, step):
        model.train(work is step)
        work()
        sync(target)
        wall, cpu = time.time(), time.process_time()
        work()
        sync(target)
        timings.append((time.time() - wall, time.process_time() - cpu))
    (forward_wall, _), (step_wall, step_cpu) = timings
    ratio = 1.0 if target.type != "cpu" else step_wall / max(step_cpu, 1e-6)
    return Costs(forward_wall / len(images), step_wall / len(images), build, ratio)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def fixed_seconds(
    costs: Costs, train_images: int, val_images: int, points: int, finetune_epochs: int, run: bool
) -> float:
    """A cell's modelled wall seconds besides its budget: the build, `points` probes, the pretraining run's
    own evaluations (`run`), a fine-tune."""
    probes = points * (train_images + val_images) * costs.forward
    measures = points * POINT_EXTRA_IMAGES * costs.forward + costs.build  # the run rebuilt once to measure them
    extra = RUN_EXTRA_IMAGES * costs.forward + costs.build + measures if run else 0.0
    tune = finetune_epochs * (train_images * costs.step + val_images * costs.forward)
    return costs.build + probes + extra + tune


@dataclass
class Pace:
    """The cells still to run, by kind, and the wall seconds of those already run; the ETA from them."""

    left: dict  # kind ("pretrained", "random") -> cells
    modelled: dict  # kind -> modelled wall seconds per cell
    spent: dict = field(default_factory=dict)  # kind -> [wall seconds of each cell run]

    def total(self) -> float:
        return sum(self.left[kind] * self.modelled[kind] for kind in self.left)

    def done(self, kind: str, seconds: float | None) -> None:
        """One cell of `kind` run, in `seconds`; None for a cell continued from a stop, whose time is no cell's pace."""
        self.left[kind] -= 1
        if seconds is not None:
            self.spent.setdefault(kind, []).append(seconds)

    def eta(self) -> float:
        """Seconds left: each kind's cells left times the mean of its cells run, else its modelled cost."""
        return sum(
            left * (sum(self.spent[kind]) / len(self.spent[kind]) if self.spent.get(kind) else self.modelled[kind])
            for kind, left in self.left.items()
        )


def clock_time(seconds_from_now: float) -> str:
    return time.strftime("%H:%M", time.localtime(time.time() + seconds_from_now))
