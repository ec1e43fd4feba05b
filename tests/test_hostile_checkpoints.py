"""A checkpoint file crafted to make loading it allocate terabytes, recurse past Python's limit or walk forever is
refused in one line before its checksum is computed; a damaged one says what can be done, as a run keeps only one."""

import sys

import pytest
import torch
from cli_runs import fails_cleanly, one_torch_thread  # noqa: F401 (autouse)

from pretexts.engine.training.checkpoint import FORMAT_VERSION, load_checkpoint, save_checkpoint
from pretexts.errors import CheckpointError


def nested(depth: int) -> list:
    value = []
    for _ in range(depth):
        value = [value]
    return value


def shared(levels: int, width: int) -> list:
    """A list of `width` references to one list of `width` references ...: a few bytes of pickle, width**levels
    values to a walk that does not notice the sharing."""
    value = [0]
    for _ in range(levels):
        value = [value] * width
    return value


def crafted(path, extra, depth_needed: int = 0) -> None:
    """A file laid out as a pretexts checkpoint, holding `extra` (its checksum is never reached)."""
    ckpt = {"format_version": FORMAT_VERSION, "model": {}, "config": {"backbone": "test_convnext"}, "extra": extra}
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * depth_needed))  # pickle recurses once per level while it writes
    try:
        torch.save({**ckpt, "checksum": "0"}, path)
    finally:
        sys.setrecursionlimit(limit)


HOSTILE = {
    "a stride-0 view declaring 40 TB": (lambda: torch.zeros(1).expand(10**13), "over 4 bytes of storage"),
    "a list nested 5,000 deep": (lambda: nested(5_000), "nested deeper than 64 levels"),
    "one list shared 16**40 times": (lambda: shared(40, 16), "counting each shared one each time it is met"),
    "a list that holds itself": (lambda: (lambda a: a.append(a) or a)([]), "holds itself"),
    "a sparse tensor": (lambda: torch.sparse_coo_tensor([[0]], [1.0], (3,)), "sparse_coo tensor"),
}


@pytest.mark.filterwarnings("ignore::UserWarning")  # torch validates sparse tensors as it loads them
@pytest.mark.parametrize("name", list(HOSTILE))
def test_a_crafted_checkpoint_is_refused_in_one_line_before_its_checksum(tmp_path, name):
    make, said = HOSTILE[name]
    crafted(tmp_path / "hostile.pt", make(), depth_needed=5_000)
    with pytest.raises(CheckpointError, match="holds values pretexts never writes") as err:
        load_checkpoint(tmp_path / "hostile.pt")
    assert said in str(err.value)
    fails_cleanly(
        ["export", "--checkpoint", tmp_path / "hostile.pt", "--out", tmp_path / "export"],
        "holds values pretexts never writes",
        said,
        "use a checkpoint written by pretexts that you trust",
    )


def test_values_pretexts_writes_still_load(tmp_path):
    """Views within their storage, a config nested as deep as a config file may be, shared and large ints pass."""
    weight = torch.arange(12.0).reshape(3, 4)
    deep_args = {"x": nested(32)}
    ckpt = {
        "model": {"w": weight, "wt": weight.t(), "row": weight[1], "tied": weight},
        "config": {"backbone": "test_convnext", "task_args": deep_args, "seed": 2**63 - 1},
        "history": [{"step": torch.tensor([i])} for i in range(1000)],
    }
    save_checkpoint(ckpt, tmp_path / "ok.pt")
    loaded = load_checkpoint(tmp_path / "ok.pt")
    assert torch.equal(loaded["model"]["wt"], weight.t()) and loaded["config"]["task_args"] == deep_args


def test_a_damaged_checkpoint_says_to_restore_a_copy_or_start_over(tmp_path):
    """A run keeps one checkpoint.pt (replaced as it goes), so there is no earlier one to fall back on."""
    save_checkpoint({"model": {"w": torch.zeros(1000)}, "config": {"backbone": "test_convnext"}}, tmp_path / "c.pt")
    data = (tmp_path / "c.pt").read_bytes()
    (tmp_path / "cut.pt").write_bytes(data[: len(data) // 2])
    (tmp_path / "empty.pt").write_bytes(b"")
    for name, said in (("cut.pt", "may be truncated"), ("empty.pt", "is empty (0 bytes)")):
        error = fails_cleanly(
            ["export", "--checkpoint", tmp_path / name, "--out", tmp_path / "export"],
            said,
            "restore it from a copy, or start its run over with --force",
        )
        assert "earlier checkpoint" not in error and "()" not in error and ": )" not in error, error
