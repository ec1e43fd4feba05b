"""A checkpoint's content checksum: catches a flipped bit that still unpickles (torch checks no CRC)."""

import hashlib

import torch

KEY = "checksum"


def checksum(ckpt: dict) -> str:
    """sha256 over every value but KEY itself: tensors by dtype, shape and bytes, the rest by a canonical repr,
    dicts in sorted-key order, so it does not depend on insertion order or the device tensors were on."""
    digest = hashlib.sha256()
    feed(digest, {k: v for k, v in ckpt.items() if k != KEY})
    return digest.hexdigest()


def feed(digest, value) -> None:
    if isinstance(value, torch.Tensor):
        flat = value.detach().to("cpu").contiguous().reshape(-1)
        put(digest, f"tensor {flat.dtype} {tuple(value.shape)}")
        digest.update(flat.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        put(digest, f"dict {len(value)}")
        for key in sorted(value, key=repr):
            put(digest, repr(key))
            feed(digest, value[key])
    elif isinstance(value, (list, tuple)):  # one canonical form: a list may come back a tuple, or not
        put(digest, f"seq {len(value)}")
        for item in value:
            feed(digest, item)
    else:
        put(digest, f"{type(value).__name__} {value!r}")


def put(digest, text: str) -> None:
    data = text.encode()
    digest.update(b"%d:" % len(data) + data)  # length-prefixed: no two sequences of values hash alike
