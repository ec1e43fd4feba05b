"""A checkpoint's content checksum: catches a flipped bit that still unpickles (torch checks no CRC)."""

import hashlib

import torch

KEY = "checksum"
MAX_DEPTH = 64  # pretexts writes 5 levels; a config read from a file nests at most 32
MAX_VALUES = 10_000_000  # values walked, a shared one each time it is met: pretexts writes thousands
CONTAINERS = (dict, list, tuple, set, frozenset)
MAX_INT_BITS = 8192  # repr of a longer int may exceed Python's digit limit; pretexts writes 64-bit ones


def checksum(ckpt: dict) -> str:
    """sha256 over every value but KEY itself: tensors by dtype, shape and bytes, the rest by a canonical repr,
    dicts in sorted-key order, so it does not depend on insertion order or the device tensors were on. Walked
    with a stack, not recursion: run `unchecksummable` on a loaded file first."""
    digest = hashlib.sha256()
    todo = [(False, {k: v for k, v in ckpt.items() if k != KEY})]  # (True, text) puts text; (False, value) feeds
    while todo:
        is_text, value = todo.pop()
        if is_text:
            put(digest, value)
        elif isinstance(value, torch.Tensor):
            flat = value.detach().to("cpu").contiguous().reshape(-1)
            put(digest, f"tensor {flat.dtype} {tuple(value.shape)}")
            digest.update(flat.view(torch.uint8).numpy())
        elif isinstance(value, dict):
            put(digest, f"dict {len(value)}")
            for key in reversed(sorted(value, key=repr)):  # the stack pops them in sorted order
                todo += [(False, value[key]), (True, repr(key))]
        elif isinstance(value, (list, tuple)):  # one canonical form: a list may come back a tuple, or not
            put(digest, f"seq {len(value)}")
            todo += [(False, item) for item in reversed(value)]
        else:
            put(digest, f"{type(value).__name__} {value!r}")
    return digest.hexdigest()


def put(digest, text: str) -> None:
    data = text.encode()
    digest.update(b"%d:" % len(data) + data)  # length-prefixed: no two sequences of values hash alike


def unchecksummable(ckpt, file_bytes: int) -> str | None:
    """What in a loaded file of `file_bytes` that `checksum` must not touch, in words, or None. A few bytes of pickle
    can declare a tensor far larger than its storage (a stride-0 view), which `.contiguous()` would allocate; nest
    deeper than repr recurses; or share one value so often (pickle's memo) that walking it as `checksum` does would
    never end. pretexts writes none of these. Each value shared is sized once (by id), so this costs the file's size."""
    sizes: dict[int, tuple[int, int, int]] = {}  # id -> (values, bytes hashed, depth) as `checksum` walks them
    todo, walking = [(ckpt, False)], set()
    while todo:
        value, children_done = todo.pop()
        key = id(value)
        if key in sizes:
            continue
        children = members(value)
        if not children_done:
            if key in walking:  # met again below itself
                return "a value that holds itself"
            walking.add(key)
            todo.append((value, True))
            todo += [(child, False) for child in children if isinstance(child, CONTAINERS) and id(child) not in sizes]
            continue
        values, hashed, depth = 1, 0, 0
        for child in children:
            if not isinstance(child, CONTAINERS):
                problem, cost = leaf(child)
                if problem:
                    return problem
                values, hashed = values + 1, hashed + cost
            else:
                more, cost, below = sizes[id(child)]
                values, hashed, depth = values + more, hashed + cost, max(depth, below)
        sizes[key] = values, hashed, depth + 1
        walking.discard(key)
        if depth + 1 > MAX_DEPTH:
            return f"values nested deeper than {MAX_DEPTH} levels"
        if values > MAX_VALUES:
            return f"more than {MAX_VALUES:,} values, counting each shared one each time it is met"
        if hashed > 4 * file_bytes + 2**24:
            return (
                f"values of {hashed:,} bytes, counting each shared one each time it is met, in a file of {file_bytes:,}"
            )
    return None


def members(value) -> list | None:
    """The values inside a container (a dict's keys and values), or None for a value that holds none."""
    if isinstance(value, dict):
        return [item for pair in value.items() for item in pair]
    return list(value) if isinstance(value, CONTAINERS) else None


def leaf(value) -> tuple[str | None, int]:
    """(what is wrong with a value that holds none, or None; about how many bytes `checksum` hashes for it)."""
    if isinstance(value, torch.Tensor):
        if value.layout != torch.strided or value.device.type != "cpu":
            return f"a {value.layout} tensor on {value.device}", 0
        declared, stored = value.numel() * value.element_size(), value.untyped_storage().nbytes()
        if declared > stored:
            shape = list(value.shape)
            return f"a tensor of shape {shape} declaring {declared:,} bytes over {stored:,} bytes of storage", 0
        return None, declared
    if isinstance(value, int):
        bits = value.bit_length()
        return (f"an integer of {bits:,} bits" if bits > MAX_INT_BITS else None), bits // 3
    return None, len(value) if isinstance(value, (str, bytes)) else 0
