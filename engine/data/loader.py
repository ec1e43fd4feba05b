"""CPU-side augmentation (albumentations) and the seeded, resumable, shardable sampler."""

import signal
import threading
from contextlib import contextmanager

import albumentations as A
import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset, DistributedSampler, IterableDataset

from pretexts.engine.data.image_check import read_or_substitute
from pretexts.engine.data.warn_once import WarnOnce

# A resize that shrinks either side averages over the pixels each output covers (cv2's INTER_AREA), as PIL's resize
# in finetune and probe does; plain bilinear samples 2x2 neighbours and aliases fine detail. A resize that enlarges
# both sides stays bilinear (one that shrinks one side and enlarges the other is area on both, nearest-like there).
ANTIALIAS = {"area_for_downscale": "image"}


def pretrain_transform(img_size: int) -> A.Compose:
    """The paper's only pretraining augmentations: RandomResizedCrop and horizontal flip (Section 4)."""
    crop = A.RandomResizedCrop(size=(img_size, img_size), scale=(0.2, 1.0), **ANTIALIAS)
    return A.Compose([crop, A.HorizontalFlip()])


def unaugmented_transform(img_size: int) -> A.Compose:
    """No augmentation: the shorter side to img_size, then the centre crop (held-out images, the monitor's bank)."""
    return A.Compose([A.SmallestMaxSize(max_size=img_size, **ANTIALIAS), A.CenterCrop(height=img_size, width=img_size)])


def image_seed(seed: int, epoch: int, index: int) -> int:
    """The seed of one image's augmentation in one epoch: the same whatever the rank, worker or resume."""
    return hash((seed, epoch, index)) & 0x7FFFFFFF


class AugmentedImages(Dataset):
    """(PIL, label) -> (uint8 [H,W,3] tensor, label), augmented with a seed fixed by (seed, epoch, index).

    The sampler passes (epoch, index) keys, so a worker process knows the epoch and the same image
    gets the same crop whatever the number of workers or ranks, and after a resume.
    """

    def __init__(self, source: Dataset, transform: A.Compose, seed: int = 0):
        self.source, self.transform, self.seed = source, transform, seed
        self.augment = Augment(transform)
        self.warn = WarnOnce()  # a file that fails to decode is reported in the first epoch only

    def __len__(self) -> int:
        return len(self.source)

    def __getitem__(self, key):
        epoch, index = key if isinstance(key, tuple) else (0, key)
        image, label = read_or_substitute(self.source, index, self.warn)
        return self.augment(image, label, image_seed(self.seed, epoch, index))


class Augment:
    """(PIL image, label, seed) -> (uint8 [H,W,3] tensor, label): one image through the albumentations transform,
    its randomness fixed by `seed`. A folder's images come through `AugmentedImages`, a stream's through
    `engine.data.streams.ImageStream`."""

    def __init__(self, transform: A.Compose):
        self.transform = transform

    def __call__(self, image, label: int, seed: int):
        array = np.asarray(image.convert("RGB"), dtype=np.uint8)
        self.transform.set_random_seed(seed)
        return torch.from_numpy(np.array(self.transform(image=array)["image"], copy=True)), label


class EpochSampler(DistributedSampler):
    """DistributedSampler that yields (epoch, index) keys and can start part-way through an epoch."""

    # shuffle and seed by keyword only: a seed passed in shuffle's place turned seed 0's shuffling off (and gave
    # every other seed seed 0's order) without an error
    def __init__(
        self,
        dataset,
        num_replicas: int = 1,
        rank: int = 0,
        *,
        shuffle: bool = True,
        seed: int = 0,
        drop_last: bool = True,
    ):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=shuffle, seed=seed, drop_last=drop_last)
        self.start = 0

    def set_position(self, epoch: int, start: int = 0) -> None:
        """Begin `epoch` at its `start`-th sample of this rank (for a mid-epoch resume)."""
        self.set_epoch(epoch)
        self.start = start

    def __iter__(self):
        indices = list(super().__iter__())[self.start :]
        return iter([(self.epoch, i) for i in indices])

    def __len__(self) -> int:
        return self.num_samples - self.start


def ignore_stop_signals(worker_id: int | None = None) -> None:
    """DataLoader workers leave SIGINT and SIGTERM to the main process, which shuts them down after saving
    (engine.training.interrupt.StopSignals); a worker killed by the terminal's Ctrl-C would otherwise fail the
    batch being loaded."""
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, signal.SIG_IGN)


STOP_SIGNALS = {signal.SIGINT, signal.SIGTERM}


@contextmanager
def stop_signals_held():
    """SIGINT and SIGTERM held back from the main thread while it starts workers (delivered when it is done, not
    lost): a worker inherits them held, so one that a signal to the whole process group (Ctrl-C, a scheduler's
    SIGTERM) reaches before `ignore_stop_signals` has run does not die and fail the batch. No-op where the
    platform cannot hold signals or off the main thread."""
    hold = hasattr(signal, "pthread_sigmask") and threading.current_thread() is threading.main_thread()
    before = signal.pthread_sigmask(signal.SIG_BLOCK, STOP_SIGNALS) if hold else None
    try:
        yield
    finally:
        if hold:
            signal.pthread_sigmask(signal.SIG_SETMASK, before)


@contextmanager
def batches(loader: DataLoader):
    """Iterate `loader`; its workers are shut down on any exit, an error included. They ignore SIGTERM
    (the main process saves first), so the exit-time terminate() would otherwise wait on them forever."""
    with stop_signals_held():  # the workers start here
        iterator = iter(loader)
    try:
        yield iterator
    finally:
        shutdown = getattr(iterator, "_shutdown_workers", None)  # multi-process iterators only
        if shutdown is not None:
            shutdown()


def make_loader(
    dataset: AugmentedImages, batch_size: int, sampler=None, workers: int = 2, drop_last: bool = True
) -> DataLoader:
    # Its own generator: creating a loader leaves the global RNG (dropout, drop-path) untouched, so a
    # run resumed mid-epoch draws the same numbers as one that was never stopped.
    return DataLoader(
        dataset,
        batch_size=batch_size,
        sampler=None if isinstance(dataset, IterableDataset) else sampler,  # a stream orders itself
        num_workers=workers,
        drop_last=drop_last,
        persistent_workers=False,
        pin_memory=torch.cuda.is_available(),
        worker_init_fn=ignore_stop_signals,
        generator=torch.Generator().manual_seed(0),
    )


def to_device(images: torch.Tensor, device: torch.device) -> torch.Tensor:
    """uint8 [B,H,W,3] on the host -> float [B,3,H,W] in [0,1] on the device (converted there)."""
    return images.to(device, non_blocking=True).permute(0, 3, 1, 2).float().div_(255)


def held_out_batches(dataset, count: int, seed: int, device: torch.device, workers: int = 2, batch_size: int = 64):
    """The same seeded `count` images of `dataset` every time, as float batches on `device`; drawn across all
    classes (an ImageFolder lists them class by class). The held-out error, its figure, `pretexts restore` and
    `pretexts energy` all read their images through this."""
    order = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(seed))[:count].tolist()
    with batches(make_loader(dataset, max(1, min(batch_size, count)), order, workers, drop_last=False)) as loader:
        for images, _ in loader:
            yield to_device(images, device)
