"""A run's arithmetic record names its device type and the precision `--amp` resolved to (fp32, bf16, fp16: `auto`
is bf16 on CUDA, fp32 elsewhere), and a resume onto another device type or precision says so."""

import torch

from pretexts.engine.training.arithmetic import arithmetic, resumed_arithmetic_note
from pretexts.engine.training.precision import amp_dtype, precision_name

CPU = {"torch": "2.x", "processes": 1, "threads": 16, "cpu_capability": "AVX512"}  # as a CPU run recorded it
CUDA = {**CPU, "gpu": "NVIDIA H100", "cudnn": 91000, "tf32": True, "cudnn_benchmark": True}


def test_the_record_names_the_device_type_and_the_resolved_precision():
    cpu = torch.device("cpu")
    record = arithmetic(cpu, 1, precision_name(amp_dtype("auto", cpu)))
    assert record["device"] == "cpu" and record["precision"] == "fp32"
    assert arithmetic(cpu, 1, "bf16")["precision"] == "bf16"
    assert precision_name(amp_dtype("auto", torch.device("cuda"))) == "bf16"  # what a CUDA run records under auto


def test_a_resume_from_a_cpu_checkpoint_onto_cuda_names_the_device_and_the_precision():
    saved = {**CPU, "device": "cpu", "precision": "fp32"}
    now = {**CUDA, "device": "cuda", "precision": "bf16"}
    note = resumed_arithmetic_note(saved, now, "run/checkpoint.pt")
    assert "device cpu -> cuda" in note and "precision fp32 -> bf16" in note
    assert "now computes in bf16 where it trained in fp32" in note and "'run/checkpoint.pt'" in note
    assert "--device" in note and "auto is bf16 on CUDA" in note


def test_the_same_arithmetic_says_nothing_and_a_changed_flag_names_its_option():
    now = {**CUDA, "device": "cuda", "precision": "bf16"}
    assert resumed_arithmetic_note(dict(now), now, "ckpt") is None
    assert resumed_arithmetic_note(None, now, "ckpt") is None  # no record at all: nothing to compare
    note = resumed_arithmetic_note({**now, "tf32": False}, now, "ckpt")
    assert "tf32 False -> True" in note and "--tf32 / --no-tf32" in note and "precision" not in note
