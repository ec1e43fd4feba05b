"""`--compile auto`, the default: compile a method's step where compiling it was measured faster and the run is long
enough to repay the compilation, run eagerly elsewhere; the start line says which and why.

A run's length is counted as steps x images x pixels (the saving per step grows with the pixels, the compile time
does not) against BREAK_EVEN_WORK, the work after which compiling the energy method's exact step on vit_tiny was
measured to repay its compile time on the CPU, times MARGIN for a loaded machine and the gain's spread. Eager under
`auto`: a step not measured faster compiled, autocast on the CPU, and every GPU (their compile time is not measured).
The measurements: docs/performance.md, section `--compile` (`benchmarks/throughput.py --compile inductor`).
"""

from __future__ import annotations

from dataclasses import dataclass

from pretexts.engine.training.resume_config import recorded_setting

AUTO = "auto"
BACKEND = "inductor"  # torch.compile's default, and what `--compile` alone means
# measured break-even of the exact energy step on vit_tiny: 118 steps of 64 images of 32 x 32 pixels
BREAK_EVEN_WORK = 118 * 64 * 32 * 32
MARGIN = 3  # three break-evens: the warm-up grows on a loaded machine and the gain varies with the task


@dataclass(frozen=True)
class CompileChoice:
    """What a run compiles: the torch.compile backend, or None for eager; `why` is for the start line."""

    backend: str | None
    why: str

    def describe(self) -> str:
        return f"compile: {self.backend or 'off'} ({self.why})"


def choose_compile(
    requested: str | None,
    *,
    measured_gain: float | None,
    device_type: str,
    autocast: bool,
    planned_steps: int | None,
    batch_size: int,
    img_size: int,
    resumed: bool = False,
) -> CompileChoice:
    """Resolve `--compile`: a backend given is used, None is eager, `auto` compiles only where all hold: the
    method's step on this backbone was measured faster compiled (`measured_gain`, compiled / eager time), on the
    CPU in float32, over a run of at least MARGIN break-evens of work. `resumed`: `requested` is what the run this
    one resumes recorded (given then, or what auto chose as it started), not an option given now."""
    if requested != AUTO:
        why = "--compile; as the resumed run has it" if resumed else "asked for" if requested else "--compile off"
        return CompileChoice(requested, why)
    why = _eager_because(measured_gain, device_type, autocast)
    if why:
        return CompileChoice(None, f"auto: {why}")
    if planned_steps is None:
        return CompileChoice(None, "auto: the run's length is not known, so the compile time may not be repaid")
    work, needed = planned_steps * batch_size * img_size**2, MARGIN * BREAK_EVEN_WORK
    if work < needed:
        steps = -(-needed // (batch_size * img_size**2))
        return CompileChoice(
            None,
            f"auto: {planned_steps} step{'s' * (planned_steps != 1)} would not repay the compile time; it pays from "
            f"about {steps} steps",
        )
    return CompileChoice(BACKEND, f"auto: this step measured {measured_gain:.2f}x its eager time on the CPU")


def run_compile_choice(cfg, measured_gain: float | None, device_type: str, planned_steps: int | None) -> CompileChoice:
    """`choose_compile` for a pretraining run's config: autocast where it asks for bf16 or fp16 (auto is float32 on
    the CPU); a --resume keeps what its checkpoint recorded unless --compile is given anew, and says so."""
    resumed = bool(cfg.resume) and cfg.compile != AUTO and cfg.compile == recorded_setting(cfg, "compile")
    return choose_compile(
        cfg.compile,
        measured_gain=measured_gain,
        device_type=device_type,
        autocast=cfg.amp in ("bf16", "fp16"),
        planned_steps=planned_steps,
        batch_size=cfg.batch_size,
        img_size=cfg.img_size,
        resumed=resumed,
    )


def _eager_because(measured_gain: float | None, device_type: str, autocast: bool) -> str | None:
    if measured_gain is None:
        return "this method's step on this backbone was not measured faster compiled"
    if device_type != "cpu":
        return f"the compile time on {device_type} is not measured; --compile compiles anyway"
    if autocast:
        return "compiling under autocast on the CPU is not measured; --compile compiles anyway"
    return None
