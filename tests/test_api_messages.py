"""The Python API's own answers: a stable kNN at small temperatures, a re-run cell that registers again, errors
that name the Python argument beside the CLI flag, shape hints, and one corruption per seed whatever the dtype."""

import pytest
import torch
import torch.nn.functional as F

import pretexts
from pretexts import Corrupted, Pretext, engine
from pretexts.engine import FinetuneConfig, Method, ProbeConfig, knn_predict
from pretexts.engine.evaluation.probe import knn_probe, register_probe
from pretexts.engine.training.run_folder import check_not_inputs
from pretexts.errors import DuplicateNameError, OutputError, ParameterError
from pretexts.registry import METHODS, PROBES, TASKS


def separable(count: int, classes: int = 4, dim: int = 16, seed: int = 0) -> tuple:
    generator = torch.Generator().manual_seed(seed)
    centres = torch.randn(classes, dim, generator=generator) * 3
    labels = torch.arange(count) % classes
    return centres[labels] + torch.randn(count, dim, generator=generator), labels


def knn_top1_float64(features, bank, labels, num_classes, k, temperature) -> torch.Tensor:
    """The weighted vote in float64 log space: log sum exp(similarity / T) per class, which cannot overflow."""
    similarity = F.normalize(features.double(), dim=1) @ F.normalize(bank.double(), dim=1).T
    nearest, neighbours = similarity.topk(k, dim=1)
    logits = torch.full((features.shape[0], num_classes), -torch.inf, dtype=torch.float64)
    for c in range(num_classes):
        votes = torch.where(labels[neighbours] == c, nearest / temperature, -torch.inf)
        logits[:, c] = votes.logsumexp(1)
    return logits.argmax(1)


def test_knn_at_a_small_temperature_stays_finite_and_matches_a_float64_reference():
    bank, labels = separable(40)
    queries = bank[:12] + 0.3 * torch.randn(12, 16, generator=torch.Generator().manual_seed(1))
    for temperature in (0.001, 0.01, 0.07):
        scores = knn_predict(queries, bank, labels, 4, k=10, temperature=temperature)
        assert torch.isfinite(scores).all(), temperature
        reference = knn_top1_float64(queries, bank, labels, 4, 10, temperature)
        assert torch.equal(scores.argmax(1), reference), temperature


@pytest.mark.parametrize(
    ("k", "temperature", "said"),
    [(0, 0.07, "k must be"), (-3, 0.07, "k must be"), (2.5, 0.07, "k must be"), (5, 0.0, "temperature must be > 0")]
    + [(5, -1.0, "temperature must be > 0"), (5, float("nan"), "temperature must be > 0")],
)
def test_knn_refuses_no_neighbours_and_a_temperature_that_is_not_positive(k, temperature, said):
    bank, labels = separable(8)
    with pytest.raises(ParameterError, match=said):
        knn_predict(bank, bank, labels, 4, k=k, temperature=temperature)


def test_the_knn_probe_at_temperature_0_001_is_not_chance_on_separable_features():
    cfg = ProbeConfig(from_scratch=True, backbone="resnet18", probes=("knn",), probe_args={"knn_temperature": 0.001})
    params = cfg.probe_params("knn")
    assert params["knn_temperature"] == 0.001
    results, _ = knn_probe(separable(200), separable(80, seed=0), 4, cfg, **params)
    assert results["k=20"] > 90 and results["k=200"] > 90, results


# ---- registering again: a redefinition replaces, a clash is refused ------------------------------------------
@pytest.fixture
def saved_registries():
    """Put the three registries back as they were after a test that adds to them."""
    pretexts.list_pretexts(), METHODS.load(), PROBES.load()
    saved = [(registry, dict(registry.table)) for registry in (TASKS, METHODS, PROBES)]
    yield
    for registry, table in saved:
        registry.table.clear(), registry.table.update(table)


def define_task(name: str):
    @pretexts.register(name)
    class Flip(Pretext):
        """Flip."""

        def apply(self, images, params):
            return Corrupted(state=images.flip(-1), target=images)

    return Flip


def define_other_task(name: str):
    @pretexts.register(name)
    class Mirror(Pretext):
        """Another class of the same name."""

        def apply(self, images, params):
            return Corrupted(state=images.flip(-2), target=images)

    return Mirror


def method_class(name: str) -> type:
    hooks = ("build_model", "loss", "held_out_error", "figure")
    return type(name, (Method,), {"__doc__": "x", **{hook: lambda self, *a: None for hook in hooks}})


def define_method(name: str, qualname: str = "Mine"):
    return engine.register_method(name)(method_class(qualname))


def define_probe(name: str):
    @register_probe(name, {})
    def centroid(train, val, num_classes, cfg):
        """x"""
        return {}, ""

    return centroid


def define_other_probe(name: str):
    @register_probe(name, {})
    def nearest(train, val, num_classes, cfg):
        """x"""
        return {}, ""

    return nearest


@pytest.mark.usefixtures("saved_registries")
@pytest.mark.parametrize(
    ("registry", "define", "define_other"),
    [
        (TASKS, define_task, define_other_task),
        (METHODS, define_method, lambda name: define_method(name, "Theirs")),
        (PROBES, define_probe, define_other_probe),
    ],
    ids=["task", "method", "probe"],
)
def test_a_rerun_cell_replaces_its_entry_and_a_different_one_of_the_name_is_refused(registry, define, define_other):
    define("test-rerun")
    with pytest.warns(UserWarning, match="'test-rerun' is registered again by a new definition") as warned:
        again = define("test-rerun")
    assert warned[0].filename == __file__  # the user's line, not pretexts'
    assert registry.get("test-rerun") is again
    with pytest.raises(DuplicateNameError, match="registered twice"):
        define_other("test-rerun")
    assert registry.get("test-rerun") is again


@pytest.mark.usefixtures("saved_registries")
@pytest.mark.parametrize(
    ("registry", "define", "builtin"),
    [(TASKS, define_task, "colorization"), (METHODS, define_method, "ae"), (PROBES, define_probe, "knn")],
    ids=["task", "method", "probe"],
)
def test_a_builtin_name_stays_refused(registry, define, builtin):
    kept = registry.get(builtin)
    with pytest.raises(DuplicateNameError, match="the built-in keeps its name"):
        define(builtin)
    assert registry.get(builtin) is kept


# ---- messages that serve both the CLI and Python -------------------------------------------------------------
@pytest.mark.parametrize(
    ("make", "said"),
    [
        (lambda: FinetuneConfig(), "(a `pretexts train` checkpoint; checkpoint= in Python)"),
        (lambda: FinetuneConfig(), "--from-scratch --backbone NAME (from_scratch=True, backbone= in Python)"),
        (lambda: FinetuneConfig(checkpoint="x.pt", from_scratch=True), "(checkpoint= or from_scratch=True in Python)"),
        (lambda: FinetuneConfig(from_scratch=True), "--backbone NAME (backbone= in Python)"),
        (lambda: ProbeConfig(), "(in Python: checkpoint=, timm_model=, or from_scratch=True with backbone=)"),
        (lambda: ProbeConfig(from_scratch=True), "--backbone NAME (backbone= in Python)"),
        (lambda: ProbeConfig(from_scratch=True, checkpoint="x.pt"), "(checkpoint= and timm_model= in Python)"),
        (lambda: ProbeConfig(checkpoint="x.pt", img_size=32), "img_size= goes with from_scratch=True"),
    ],
)
def test_config_errors_name_the_python_argument_beside_the_flag(make, said):
    with pytest.raises(ParameterError) as err:
        make()
    assert said in str(err.value)


def test_an_export_over_its_own_checkpoint_names_out_in_python(tmp_path):
    (tmp_path / "checkpoint.pt").write_bytes(b"")
    with pytest.raises(OutputError, match=r"choose another --out \(out= in Python\)"):
        check_not_inputs([tmp_path], [tmp_path / "checkpoint.pt"])


@pytest.mark.parametrize(
    ("shape", "hint"),
    [
        ((2, 1, 8, 8), "images.expand(-1, 3, -1, -1)"),
        ((2, 8, 8, 3), "images.permute(0, 3, 1, 2)"),
        ((3, 8, 8), "an iterable of batches such as [images]"),
    ],
)
def test_a_wrong_batch_shape_says_how_to_make_it_one(shape, hint):
    with pytest.raises(ParameterError, match="images must be a batch") as err:
        pretexts.create_pretext("random-mask")(torch.rand(shape))
    assert hint in str(err.value)


def test_an_unknown_method_argument_suggests_the_close_one():
    cfg = engine.PretrainConfig(method_args={"stpes": 3})
    with pytest.raises(ParameterError, match="no argument 'stpes'.*Did you mean: steps"):
        METHODS.get("energy").parse_args(cfg)


def test_denoising_draws_one_corruption_per_seed_whatever_the_dtype():
    images = torch.rand(2, 3, 8, 8, generator=torch.Generator().manual_seed(1))
    task = pretexts.create_pretext("denoising")
    single = task(images, torch.Generator().manual_seed(0)).state
    double = task(images.double(), torch.Generator().manual_seed(0)).state
    torch.testing.assert_close(double, single.double(), rtol=0, atol=1e-6)
    # float32 as it always was: gamma, then float32 noise, from the one generator
    generator = torch.Generator().manual_seed(0)
    gamma = torch.rand(2, generator=generator).view(-1, 1, 1, 1)
    assert torch.equal(
        single, gamma.sqrt() * images + (1 - gamma).sqrt() * torch.randn(2, 3, 8, 8, generator=generator)
    )
