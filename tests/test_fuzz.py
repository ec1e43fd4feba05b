"""Hypothesis drives every pretext with random parameters, batches, sizes and dtypes.

Valid parameters (from each task's declared `Param` ranges) keep the contract: shapes, ranges,
seeded determinism. A size that does not fit (a mask grid larger than the image) may be refused, but
only with ParameterError. Invalid parameters and inputs always raise ParameterError, never an error
from deeper in torch.
"""

from collections import Counter

import pytest
import torch
from hypothesis import HealthCheck, given, note, settings
from hypothesis import strategies as st
from pretext_images import tiny_vit

from pretexts import Param, ParameterError, create_pretext, get_pretext_class, list_pretexts
from pretexts.engine.methods.states import state_adapter
from pretexts.tasks.mixed import is_pixel_task

TASKS = list_pretexts()
PIXEL_TASKS = [n for n in TASKS if n != "mixed" and is_pixel_task(get_pretext_class(n)())]
MIX_ENTRIES = PIXEL_TASKS + [f"{n}:{p}" for n in PIXEL_TASKS for p in get_pretext_class(n).presets]
UNCLAMPED = {"denoising"}  # x0 = sqrt(g) x + sqrt(1 - g) e, not clamped, as the paper's formula
DTYPES = [torch.uint8, torch.float32, torch.float64, torch.float16, torch.bfloat16]
FUZZ = settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))


def valid_value(param) -> st.SearchStrategy:
    """A value in the declared range, sometimes as the string the CLI would pass."""
    if param.choices is not None:
        value = st.sampled_from(param.choices)
    elif param.kind is tuple:
        value = st.lists(st.sampled_from(MIX_ENTRIES), min_size=1, max_size=4)
        return st.one_of(value, value.map(",".join))
    elif param.kind is bool:
        value = st.booleans()
    elif param.kind is int:
        low = -1000 if param.low is None else int(param.low)
        high = low + 1000 if param.high is None else int(param.high)
        value = st.one_of(st.integers(low, min(high, low + 40)), st.integers(low, high))  # small sizes fit more
    else:
        value = st.floats(param.low, param.high, allow_nan=False, allow_infinity=False)
    return st.one_of(value, value.map(str))


@st.composite
def valid_params(draw, cls) -> dict:
    kwargs = {key: draw(valid_value(p)) for key, p in cls.params.items() if draw(st.booleans())}
    values = {**{k: p.default for k, p in cls.params.items()}, **kwargs}
    for low in [k for k in cls.params if k.endswith("low")]:  # keep low <= high pairs ordered
        high = low[:-3] + "high"
        if high in cls.params and float(values[low]) > float(values[high]):
            kwargs[low], kwargs[high] = values[high], values[low]
    return kwargs


def make_images(seed: int, batch: int, height: int, width: int, dtype: torch.dtype) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    if dtype == torch.uint8:
        return torch.randint(0, 256, (batch, 3, height, width), generator=generator, dtype=torch.uint8)
    return torch.rand(batch, 3, height, width, generator=generator).to(dtype)


def corrupt(task, images, seed: int):
    return task(images, torch.Generator().manual_seed(seed))


def check_contract(name: str, task, images: torch.Tensor, sample, seed: int) -> None:
    clean = images.float() / 255 if images.dtype == torch.uint8 else images
    assert sample.state.shape == sample.target.shape and torch.isfinite(sample.state.float()).all()
    if is_pixel_task(task):
        assert sample.state.shape == images.shape and sample.state.dtype == clean.dtype
        assert torch.equal(sample.target, clean)
        subtasks = set(task.tasks) if name == "mixed" else {name}
        if not {entry.partition(":")[0] for entry in subtasks} & UNCLAMPED:
            assert 0 <= sample.state.min() and sample.state.max() <= 1
    else:  # patch sorting: the state is the true position table, its rows shuffled
        assert sample.context.shape == images.shape and 0 <= sample.context.min() and sample.context.max() <= 1
        assert torch.allclose(sample.state.sum(1), sample.target.sum(1), atol=1e-4)
    assert torch.equal(corrupt(task, images, seed).state, sample.state)  # seeded: the same draw again


@pytest.mark.parametrize("name", TASKS)
def test_valid_parameters_keep_the_contract(name):
    cls, outcomes = get_pretext_class(name), Counter()

    @FUZZ
    @given(data=st.data())
    def check(data):
        kwargs = data.draw(valid_params(cls), label="params")
        patch = data.draw(st.sampled_from([4, 8]), label="vit patch")
        height, width = (32, 32) if name == "patch-sorting" else (data.draw(st.integers(4, 40)),) * 2
        if name != "patch-sorting" and data.draw(st.booleans()):
            width = data.draw(st.integers(4, 40), label="width")
        images = make_images(
            data.draw(st.integers(0, 2**16)),
            data.draw(st.integers(1, 4), label="batch"),
            height,
            width,
            data.draw(st.sampled_from(DTYPES), label="dtype"),
        )
        try:
            task = state_adapter(create_pretext(name, **kwargs), tiny_vit(patch)).prepare()
            sample = corrupt(task, images, seed=7)
        except ParameterError as err:  # a size that does not fit this image or patch: refused, clearly
            message = str(err)
            assert message and "\n" not in message and message.endswith(".")
            note(message)
            outcomes["refused"] += 1
            return
        check_contract(name, task, images, sample, seed=7)
        outcomes["kept"] += 1

    check()
    assert outcomes["kept"] >= 5, outcomes  # most draws must run, or the test proves nothing


def invalid_value(param) -> st.SearchStrategy:
    """A value outside the declared range or of the wrong type."""
    if param.kind is tuple:
        names = st.sampled_from(["nope", "mixed", "patch-sorting", "random-mask:huge", ""])
        return st.one_of(st.sampled_from([[], (), {"a": 1}, 7.5]), st.lists(names, min_size=1))
    junk = ["abc", "", "1,2", [1], {"a": 1}, object(), float("nan")] + ([] if param.kind is bool else [True])
    options = [st.sampled_from(junk)]
    if param.choices is not None:
        options.append(st.text(min_size=1).filter(lambda v: v not in map(str, param.choices)))
    finite = param.kind is int
    if param.low is not None:
        below = st.floats(max_value=param.low, exclude_max=True, allow_nan=False, allow_infinity=not finite)
        options.append(below.map(param.kind).filter(lambda v: v < param.low))
    if param.high is not None:
        above = st.floats(min_value=param.high, exclude_min=True, allow_nan=False, allow_infinity=not finite)
        options.append(above.map(param.kind).filter(lambda v: v > param.high))
    if param.kind is int:  # a fraction where a whole number is declared
        options.append(st.floats(-1e6, 1e6).filter(lambda v: v != int(v)))
    return st.one_of(options)


@st.composite
def invalid_call(draw, cls) -> tuple[dict, torch.Tensor]:
    """Parameters of which one is wrong, or good parameters and a batch of the wrong shape or dtype."""
    pairs = [(k, k[:-3] + "high") for k in cls.params if k.endswith("low") and k[:-3] + "high" in cls.params]
    kinds = ["name", "preset", "images"] + ["value"] * bool(cls.params) + ["order"] * bool(pairs)
    kind = draw(st.sampled_from(kinds))
    images = torch.rand(2, 3, 32, 32)
    if kind == "value":
        key = draw(st.sampled_from(sorted(cls.params)))
        return {key: draw(invalid_value(cls.params[key]))}, images
    if kind == "name":
        alphabet = "abcdefghijklmnopqrstuvwxyz_"
        return {draw(st.text(alphabet, min_size=1, max_size=12).filter(lambda k: k not in cls.params)): 1}, images
    if kind == "preset":
        return {"preset": draw(st.text(min_size=1).filter(lambda p: p not in cls.presets))}, images
    if kind == "order":  # both in range, but low above high
        low, high = draw(st.sampled_from(pairs))
        return {low: cls.params[high].high, high: cls.params[low].low + 1e-6}, images
    shape = draw(st.sampled_from([(2, 3, 32, 32), (3, 32, 32), (2, 1, 32, 32), (2, 4, 32, 32), (1, 2, 3, 32, 32)]))
    dtypes = [torch.int32, torch.int64, torch.bool] + ([] if shape == (2, 3, 32, 32) else [torch.float32])
    return {}, torch.zeros(shape, dtype=draw(st.sampled_from(dtypes)))


@pytest.mark.parametrize("name", TASKS)
def test_invalid_parameters_and_inputs_raise_parameter_error(name):
    cls = get_pretext_class(name)

    @FUZZ
    @given(call=invalid_call(cls))
    def check(call):
        kwargs, images = call
        with pytest.raises(ParameterError, match=r"\S"):  # (the CLI prints it on one line, whatever it echoes)
            state_adapter(create_pretext(name, **kwargs), tiny_vit()).prepare()(
                images, torch.Generator().manual_seed(0)
            )

    check()


PARAM_KINDS = [
    Param(16, int, 1, 64),
    Param(0.5, float, 0.0, 1.0),
    Param(0.1, float, low=0.0),
    Param(True, bool),
    Param("a", str, choices=("a", "b")),
    Param(3, int),
]  # tuple: names checked by their task (mixed)


@pytest.mark.parametrize("param", PARAM_KINDS, ids=lambda p: p.describe())
def test_every_kind_of_param_refuses_wrong_values(param):
    """Param is what third-party tasks declare too: every kind, bounded or not, refuses wrong values."""

    @FUZZ
    @given(value=invalid_value(param))
    def check(value):
        with pytest.raises(ParameterError):
            param.convert("task", "p", value)

    check()
