"""A mixture of pixel pretext tasks, one drawn per image (paper, Section 4.2 and Table 3: Ours Mixed)."""

import torch
from torch import Tensor

from ..base import Corrupted, Pretext, splits_draw_and_apply
from ..errors import ParameterError, PretextsError
from ..params import Param
from ..registry import get_pretext_class, register
from .masking import fill_param

# the paper's four families, drawn uniformly (Section 4.2); masking is random-mask, its best row (Table 1: 79.7)
DEFAULT_TASKS = ("random-mask", "super-resolution", "denoising", "colorization")


def is_pixel_task(task: Pretext) -> bool:
    """A task whose state is the image itself."""
    return task.state_kind == "pixels"


def draw_part(task: Pretext, images: Tensor, generator) -> dict:
    """A sub-task's parameters for its images; a task that overrides `corrupt` alone (a plugin) has none to
    replay, so its whole sample is drawn here, in the same turn of the generator."""
    if splits_draw_and_apply(task):
        return task.draw(images, generator)
    return {"sample": task.corrupt(images, generator)}


def apply_part(task: Pretext, images: Tensor, params: dict) -> Corrupted:
    return task.apply(images, params) if splits_draw_and_apply(task) else params["sample"]


@register("mixed")
class Mixed(Pretext):
    """One task per image, drawn uniformly from `tasks` (paper, Table 3: Ours Mixed, 81.2 top-1 for ViT-S).

    The default mixes masking, super-resolution, denoising and colorization, as the paper's mixed runs
    (Section 4.2). Each entry is a task name, optionally followed by a preset and parameters, each after a
    ':' (`random-mask:small`, `super-resolution:scale=4`, `gridded-mask:grid=4:ratio=0.5`); sub-tasks take
    their defaults otherwise, but for `fill`, which is passed to every sub-task that declares one (the masks)
    unless the entry gives its own.
    Only pixel tasks mix, since their states share one shape. Images are grouped by task; `draw` draws which
    task each image gets, then each task's parameters for its group (task by task, in `tasks` order), and
    `apply` applies each group's task with its drawn parameters in one call. info["task"] holds each image's
    index into `tasks`; info["parts"][index] that sub-task's own info, for the images with task == index.
    The trivial restorer is each image's own task's; none when a sub-task has none. A mixture of masks alone
    declares `masking`, as each of its parts does.
    """

    params = {
        "tasks": Param(
            DEFAULT_TASKS,
            tuple,
            help="task names to draw from, each optionally with :PRESET "
            "and :KEY=VALUE parts (e.g. super-resolution:scale=4)",
        ),
        "fill": fill_param("passed to the sub-tasks that declare a fill (the masks): "),
    }

    def check(self) -> None:
        self.subtasks = []
        for entry in self.tasks:
            name, preset, args = self.parse_entry(entry)
            if name == self.name:
                raise ParameterError(f"{self.name}: cannot mix '{self.name}' into itself.")
            try:
                cls = get_pretext_class(name)
                fill = {"fill": self.fill} if "fill" in cls.params else {}
                task = cls(preset=preset, **{**fill, **args})  # a sub-task's own fill wins over the mixture's
            except PretextsError as err:
                raise ParameterError(f"{self.name}: parameter 'tasks': {err}") from None
            if not is_pixel_task(task):
                raise ParameterError(f"{self.name}: only pixel tasks can be mixed; '{name}' restores something else.")
            self.subtasks.append(task)
        self.masking = bool(self.subtasks) and all(task.masking for task in self.subtasks)
        restorers = [task.trivial_restorer for task in self.subtasks]
        self.trivial_restorer = None if None in restorers else "each task's own"

    def sizes(self, side: int) -> dict:
        """Each sub-task's `sizes`, under 'N:name'."""
        return {f"{i}:{task.name}": found for i, task in enumerate(self.subtasks) if (found := task.sizes(side))}

    def parse_entry(self, entry: str) -> tuple[str, str | None, dict[str, str]]:
        """'super-resolution:scale=4' -> ('super-resolution', None, {'scale': '4'}); 'random-mask:small' ->
        ('random-mask', 'small', {}): the name, then ':'-separated parts, each a preset or KEY=VALUE."""
        name, *parts = [part.strip() for part in entry.split(":")]
        presets = [part for part in parts if "=" not in part]
        args = dict(part.split("=", 1) for part in parts if "=" in part)
        if len(presets) > 1 or "" in presets or "" in args:
            raise ParameterError(
                f"{self.name}: parameter 'tasks': '{entry}' is not NAME, NAME:PRESET or "
                f"NAME:KEY=VALUE[:KEY=VALUE...] (e.g. super-resolution:scale=4)."
            )
        return (
            name,
            (presets[0] if presets else None),
            {k.strip().replace("-", "_"): v.strip() for k, v in args.items()},
        )

    def draw(self, images: Tensor, generator=None) -> dict:
        """ "task" [B]: each image's index into `tasks`; "parts"[index]: that task's parameters for its images."""
        which = torch.randint(len(self.subtasks), (images.shape[0],), generator=generator, device=images.device)
        parts = {}
        for index, task in enumerate(self.subtasks):
            group = (which == index).nonzero().squeeze(1)
            if group.numel() > 0:
                parts[index] = draw_part(task, images[group], generator)
        return {"task": which, "parts": parts}

    def apply(self, images: Tensor, params: dict) -> Corrupted:
        which = params["task"]
        state = torch.empty_like(images)
        info = {"task": which, "tasks": self.tasks, "parts": {}}
        for index, part in params["parts"].items():
            group = (which == index).nonzero().squeeze(1)
            sample = apply_part(self.subtasks[index], images[group], part)
            state[group] = sample.state.to(state.dtype)
            info["parts"][index] = sample.info
        return Corrupted(state=state, target=images, info=info)

    def trivial_restore(self, sample: Corrupted) -> Tensor | None:
        """Each group of images restored by its own task's trivial restorer; None when a sub-task has none."""
        if self.trivial_restorer is None:
            return None
        restored = sample.state.clone()
        for index, task in enumerate(self.subtasks):
            group = (sample.info["task"] == index).nonzero().squeeze(1)
            if group.numel() == 0:
                continue
            part = Corrupted(state=sample.state[group], target=sample.target[group], info=sample.info["parts"][index])
            restored[group] = task.trivial_restore(part).to(restored.dtype)
        return restored

    def preview(self, sample: Corrupted, state: Tensor) -> Tensor:
        """Each group of images shown by its own task's `preview`, each row labelled with its task (and what that
        task's preview says of it, e.g. denoising's g), with every sub-task's note on the display."""
        shown = state.detach().float().clamp(0, 1)
        labels, notes = [""] * state.shape[0], []
        for index, task in enumerate(self.subtasks):
            group = (sample.info["task"] == index).nonzero().squeeze(1)
            if group.numel() == 0:
                continue
            part = Corrupted(state=sample.state[group], target=sample.target[group], info=sample.info["parts"][index])
            preview = task.preview(part, state[group])
            shown[group] = preview.float()
            for row, label in zip(group.tolist(), getattr(preview, "row_labels", None) or [""] * group.numel()):
                labels[row] = f"{task.name}\n{label}" if label else task.name
            if (note := getattr(preview, "display", None)) and note not in notes:
                notes.append(note)
        shown.row_labels = labels
        if notes:
            shown.display = "; ".join(notes)
        return shown
