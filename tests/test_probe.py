"""Frozen-feature evaluation: weighted kNN, linear and MLP heads on cached features, the probe command."""

import json

import pytest
import torch
import torch.nn.functional as F
from click.testing import CliRunner
from pretrained_checkpoints import single_thread, write_checkpoint  # noqa: F401 (a fixture)
from torch import nn

from pretexts.cli import main
from pretexts.engine import ProbeConfig, knn_predict
from pretexts.engine.evaluation.probe import probe_head, train_head
from pretexts.engine.measures.knn import knn_accuracy
from pretexts.errors import ParameterError, UnknownNameError
from pretexts.params import Param

pytestmark = pytest.mark.usefixtures("single_thread")  # see pretrained_checkpoints.single_thread


def test_knn_on_one_hot_label_features_is_perfect():
    generator = torch.Generator().manual_seed(0)
    train_labels, val_labels = (
        torch.randint(10, (500,), generator=generator),
        torch.randint(10, (100,), generator=generator),
    )
    train, val = F.one_hot(train_labels, 10).float(), F.one_hot(val_labels, 10).float()
    for k in (20, 200):
        assert knn_accuracy(train, train_labels, val, val_labels, 10, k) == 100.0


def test_knn_votes_are_weighted_by_exp_similarity_over_temperature():
    # one neighbour at cosine 1 with label 0, two at cosine 0.6 with label 1: the majority says 1,
    # the temperature-weighted vote (exp(1/0.07) > 2 exp(0.6/0.07)) says 0
    bank = torch.tensor([[1.0, 0.0], [0.6, 0.8], [0.6, -0.8]])
    labels = torch.tensor([0, 1, 1])
    scores = knn_predict(torch.tensor([[1.0, 0.0]]), bank, labels, num_classes=2, k=3, temperature=0.07)
    assert scores.argmax(1).item() == 0
    torch.testing.assert_close(scores[0, 1] / scores[0, 0], 2 * torch.exp(torch.tensor((0.6 - 1) / 0.07)))
    assert knn_predict(torch.tensor([[1.0, 0.0]]), bank, labels, 2, k=3, temperature=10.0).argmax(1).item() == 1


def test_knn_compares_directions_not_lengths():
    """Cosine similarity: a long vector far away in Euclidean distance is still the nearest in angle."""
    bank, labels = torch.tensor([[3.0, 2.0], [0.0, 10.0]]), torch.tensor([0, 1])
    assert knn_predict(torch.tensor([[0.0, 1.0]]), bank, labels, num_classes=2, k=1).argmax(1).item() == 1
    assert knn_predict(torch.tensor([[1.0, 0.6]]), bank, labels, num_classes=2, k=1).argmax(1).item() == 0


def test_k_larger_than_the_bank_uses_every_neighbour():
    bank, labels = torch.eye(3), torch.tensor([0, 1, 2])
    assert knn_predict(torch.ones(1, 3), bank, labels, 3, k=200).shape == (1, 3)


def test_linear_and_mlp_heads_learn_separable_features():
    generator = torch.Generator().manual_seed(0)
    centres = torch.randn(5, 32, generator=generator) * 3
    labels = torch.randint(5, (600,), generator=generator)
    features = centres[labels] + torch.randn(600, 32, generator=generator)
    for method in ("linear", "mlp"):
        torch.manual_seed(0)
        head = probe_head(method, 32, 5, hidden=64)
        accuracy = train_head(
            head,
            (features[:500], labels[:500]),
            (features[500:], labels[500:]),
            seed=0,
            epochs=100,
            batch_size=256,
            lr=1e-3,
            weight_decay=0.0,
        )
        assert accuracy > 90, (method, accuracy)


def test_mlp_head_is_three_layers_with_relu():
    head = probe_head("mlp", 192, 10, hidden=768)
    linears = [m for m in head if isinstance(m, nn.Linear)]
    assert [(m.in_features, m.out_features) for m in linears] == [(192, 768), (768, 768), (768, 10)]
    assert sum(isinstance(m, nn.ReLU) for m in head) == 2


def test_unknown_probe_method_is_refused():
    with pytest.raises(UnknownNameError, match="unknown probe 'svm'. Probes: linear, mlp, knn"):
        ProbeConfig(checkpoint="x", probes=("svm",))
    with pytest.raises(UnknownNameError, match="Did you mean: linear"):
        ProbeConfig(checkpoint="x", probes=("lineer",))


def test_cli_probe_extracts_once_and_reports_every_method(tmp_path):
    path, model = write_checkpoint(tmp_path / "ckpt.pt")
    out = tmp_path / "probe"
    result = CliRunner().invoke(
        main,
        [
            "probe",
            "--checkpoint",
            str(path),
            "--probe",
            "linear",
            "--probe",
            "mlp",
            "--probe",
            "knn",
            "--epochs",
            "5",
            "--hidden",
            "64",
            "--workers",
            "0",
            "--out",
            str(out),
        ],
    )
    assert result.exit_code == 0, result.output
    assert result.output.count("features: 320 train, 80 val images") == 1
    results = json.loads((out / "results.json").read_text())
    assert results["feature_dim"] == model.backbone.num_features and results["classes"] == 10
    assert 0 <= results["linear"]["top1"] <= 100 and 0 <= results["mlp"]["top1"] <= 100
    assert set(results["knn"]) == {"k=20", "k=200", "temperature", "bank"} and results["knn"]["temperature"] == 0.07
    assert results["knn"]["bank"] == 320 and "training images vote" not in result.output


def test_a_registered_probe_runs_from_the_cli_beside_the_built_ins(tmp_path):
    """Adding a probe is one decorated function: nearest class mean on the cached features."""
    from pretexts.engine.evaluation.probe import register_probe
    from pretexts.registry import PROBES

    @register_probe("nearest-mean", {"cosine": Param(True, bool, help="compare directions, not distances")})
    def nearest_mean(train, val, num_classes, cfg, *, cosine):
        """Cosine similarity (or distance) to each class's mean feature."""
        means = torch.stack([train[0][train[1] == c].mean(0) for c in range(num_classes)])
        if cosine:
            guess = (F.normalize(val[0], dim=1) @ F.normalize(means, dim=1).T).argmax(1)
        else:
            guess = torch.cdist(val[0], means).argmin(1)
        top1 = 100.0 * (guess == val[1]).float().mean().item()
        return {"top1": top1, "cosine": cosine}, f"nearest-mean top-1: {top1:.2f}%"

    try:
        listed = CliRunner().invoke(main, ["list", "--probes"])
        assert "nearest-mean       Cosine similarity (or distance) to each class's mean feature." in listed.output
        assert "knn " in listed.output and "linear " in listed.output and "cosine=True" in listed.output
        listed = CliRunner().invoke(main, ["list", "--probes", "-v", "nearest-*"]).output
        assert "--probe-arg cosine=...  bool, default True. compare directions, not distances" in listed
        path, _ = write_checkpoint(tmp_path / "ckpt.pt")
        out = tmp_path / "probe"
        result = CliRunner().invoke(
            main,
            [
                "probe",
                "--checkpoint",
                str(path),
                "--probe",
                "nearest-mean",
                "--probe",
                "knn",
                "--probe-arg",
                "cosine=no",
                "--knn-k",
                "5",
                "--workers",
                "0",
                "--out",
                str(out),
            ],
        )
        assert result.exit_code == 0, result.output
        results = json.loads((out / "results.json").read_text())
        assert 0 <= results["nearest-mean"]["top1"] <= 100 and results["nearest-mean"]["cosine"] is False
        assert set(results["knn"]) == {"k=5", "temperature", "bank"}
        assert "nearest-mean top-1: " in result.output
        bad = CliRunner().invoke(
            main,
            [
                "probe",
                "--checkpoint",
                str(path),
                "--probe",
                "nearest-mean",
                "--probe-arg",
                "cosine=maybe",
                "--out",
                str(tmp_path / "bad"),
            ],
        )
        assert bad.exit_code == 2 and "probe nearest-mean: parameter 'cosine' must be true or false" in bad.output
    finally:
        PROBES.table.pop("nearest-mean")


def test_probe_parameters_are_checked_by_the_probes_that_declare_them():
    cfg = ProbeConfig(checkpoint="x", probes=("linear", "knn"), probe_args={"epochs": "7", "knn_k": [5, "9"]})
    assert cfg.probe_params("linear") == {"epochs": 7, "batch_size": 256, "lr": 1e-3, "weight_decay": 0.0}
    assert cfg.probe_params("knn") == {"knn_k": (5, 9), "knn_temperature": 0.07}
    with pytest.raises(ParameterError, match=r"no probe has a parameter 'epoch'\. Did you mean: epochs"):
        ProbeConfig(checkpoint="x", probe_args={"epoch": 3})
    # a value is refused even when no probe that takes it runs: it is never silently unused
    with pytest.raises(ParameterError, match=r"probe knn: parameter 'knn_k' is 0; allowed range is \[1, "):
        ProbeConfig(checkpoint="x", probes=("linear",), probe_args={"knn_k": "20,0"})


def test_a_probe_parameter_given_as_a_config_field_moves_into_probe_args(tmp_path):
    """`--set epochs=3`, and a --config file that gives probe parameters beside the fields (epochs, knn_k): those
    keys become probe arguments."""
    from pretexts.cli.config_file import build_config
    from pretexts.engine.evaluation.probe_config import with_probe_args

    old = tmp_path / "config.json"
    old.write_text(
        json.dumps({"checkpoint": "c.pt", "probes": ["knn", "mlp"], "knn_k": [5], "hidden": 64, "epochs": 100})
    )
    cfg = build_config(ProbeConfig, {}, str(old), ("epochs=3",), merge=("probe_args",), loose=with_probe_args)
    assert cfg.probe_args == {"knn_k": [5], "hidden": 64, "epochs": "3"}
    assert cfg.probe_params("mlp")["epochs"] == 3 and cfg.probe_params("knn")["knn_k"] == (5,)


def test_the_standardised_knn_probe_sees_classes_a_loud_direction_drowns():
    from pretexts.engine.evaluation.probe import knn_probe, standardised_knn_probe

    g = torch.Generator().manual_seed(0)
    labels = torch.arange(400) % 4
    signal = torch.nn.functional.one_hot(labels, 4).float() + 0.3 * torch.randn(400, 4, generator=g)
    features = torch.cat([signal, 10 * torch.randn(400, 3, generator=g)], dim=1)  # brightness-like nuisances
    train, val = (features[:300], labels[:300]), (features[300:], labels[300:])
    cfg = ProbeConfig(checkpoint="unused.pt", probes=("knn", "knn-std"), probe_args={"knn_k": "20"})
    plain, _ = knn_probe(train, val, 4, cfg, **cfg.probe_params("knn"))
    standardised, line = standardised_knn_probe(train, val, 4, cfg, **cfg.probe_params("knn-std"))
    assert standardised["k=20"] > 90 > 60 > plain["k=20"] and "standardised" in line


@pytest.fixture
def probe_plugins(tmp_path):
    """Installs probe plugin distributions (module, dist-info, `pretexts.probes` entry point) for one test."""
    from plugin_installs import plugin_installer

    from pretexts.registry import PROBES

    with plugin_installer(tmp_path, PROBES, "pretexts.probes") as install:
        yield install


def test_list_probes_names_broken_and_clashing_probe_plugins(probe_plugins):
    """The one listing shows every registry's plugin trouble: a probe plugin that fails to import, and one that
    re-registers a built-in name (which wins), are both named."""
    from pretexts.registry import PROBES

    probe_plugins("probe_broken", "raise ImportError('needs faiss')\n", "faiss-knn = probe_broken:probe")
    probe_plugins(
        "probe_dup",
        """
        from pretexts.engine.evaluation.probe import register_probe

        @register_probe("knn")
        def probe(train, val, num_classes, cfg):
            '''Another knn.'''
        """,
        "knn = probe_dup:probe",
    )
    with pytest.warns(UserWarning, match="the built-in wins"):
        PROBES.load(force=True)
    listed = CliRunner().invoke(main, ["list", "--probes"]).output
    assert "faiss-knn          BROKEN plugin: probe_broken 1.0" in listed and "needs faiss" in listed
    assert "knn                IGNORED plugin (the built-in 'knn' wins): probe_dup 1.0" in listed
    assert PROBES.table["knn"].__module__ == "pretexts.engine.evaluation.probe"


# ---- what is probed, on which data --------------------------------------------------------------
def probe_cli(*args) -> tuple:
    """(click's result, results.json) of a kNN probe; the last arg pair is the --out."""
    result = CliRunner().invoke(
        main, ["probe", "--probe", "knn", "--knn-k", "5", "--workers", "0", "--quiet", *map(str, args)]
    )
    assert result.exit_code == 0, result.output
    out = args[list(args).index("--out") + 1]
    return result, json.loads((out / "results.json").read_text())


def test_probe_without_data_uses_the_data_the_checkpoint_was_pretrained_on(tmp_path):
    from cli_runs import tiny_image_folder

    data = tiny_image_folder(tmp_path / "data")  # 2 classes, 32 train and 2 val images: not the 10-class sample
    ckpt, _ = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext", data=str(data))
    result, results = probe_cli("--checkpoint", ckpt, "--out", tmp_path / "p")
    first = result.output.splitlines()[0]
    assert first.startswith(f"probing checkpoint '{ckpt}' on '{data}' (the data the weights were trained on"), first
    assert "32 train, 2 val images, 2 classes" in first
    assert results["classes"] == 2 and results["data"] == str(data) and results["data_origin"] == "recorded"
    assert json.loads((tmp_path / "p" / "config.json").read_text())["data"] == str(data)  # the data used, recorded
    _, given = probe_cli("--checkpoint", ckpt, "--data", "sample", "--out", tmp_path / "s")
    assert given["classes"] == 10 and given["data_origin"] == "given"


def test_probe_from_scratch_is_the_seeded_random_init_baseline(tmp_path):
    result, first = probe_cli("--from-scratch", "--backbone", "test_convnext", "--out", tmp_path / "a")
    assert result.output.startswith("probing test_convnext at random init (seed 0) on 'sample' (the embedded sample")
    _, again = probe_cli("--from-scratch", "--backbone", "test_convnext", "--out", tmp_path / "b")
    _, other = probe_cli("--from-scratch", "--backbone", "test_convnext", "--seed", "1", "--out", tmp_path / "c")
    assert first["knn"] == again["knn"] and first["checkpoint"] is None and first["backbone"] == "test_convnext"
    assert other["knn"] != first["knn"]  # another seed, another random backbone


def test_probe_takes_exports_and_timm_weights_and_gets_the_checkpoints_features(tmp_path):
    """An export (folder or .safetensors) and the same weights as a timm model with a weights file probe exactly as
    the pretraining checkpoint they came from."""
    import timm
    from safetensors.torch import save_file

    from pretexts.engine import export_backbone

    ckpt, model = write_checkpoint(tmp_path / "ckpt.pt", "test_convnext")
    _, reference = probe_cli("--checkpoint", ckpt, "--out", tmp_path / "ref")
    export_backbone(str(ckpt), str(tmp_path / "folder"))
    export_backbone(str(ckpt), str(tmp_path / "file.safetensors"))
    for source in (tmp_path / "folder", tmp_path / "file.safetensors"):
        result, results = probe_cli("--checkpoint", source, "--out", tmp_path / f"p-{source.stem}")
        assert result.output.startswith(f"probing export '{source}' on 'sample'")
        assert results["knn"] == reference["knn"] and results["img_size"] == 32
    result, folder = probe_cli("--timm-model", f"local-dir:{tmp_path / 'folder'}", "--out", tmp_path / "local")
    assert folder["knn"] == reference["knn"]
    # a timm model with a weights file: timm's own preprocessing (test_convnext: 160 px), nothing downloaded
    save_file(model.backbone.state_dict(), tmp_path / "weights.safetensors")
    result, results = probe_cli(
        "--timm-model", "test_convnext", "--checkpoint", tmp_path / "weights.safetensors", "--out", tmp_path / "timm"
    )
    assert results["backbone"] == "test_convnext" and results["img_size"] == 160
    assert timm.create_model("test_convnext").pretrained_cfg["input_size"] == (3, 160, 160)


def test_timm_weights_are_read_from_the_hub_cache_and_never_downloaded(tmp_path, monkeypatch):
    """The default weights of a timm name come from the Hugging Face cache on disk; absent, one line says so."""
    import huggingface_hub
    import timm
    from safetensors.torch import save_file

    from pretexts.engine.evaluation.weights import cached_weights

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    monkeypatch.setenv("TORCH_HOME", str(tmp_path / "torch"))
    assert cached_weights("test_convnext") is None
    result = CliRunner().invoke(main, ["probe", "--timm-model", "test_convnext", "--out", str(tmp_path / "p")])
    assert result.exit_code == 2 and "not on disk, and nothing is downloaded" in result.output
    assert len(result.output.strip().splitlines()) == 1
    # the Hub cache's layout: refs/main names the snapshot holding the file
    repo = tmp_path / "hub" / "models--timm--test_convnext.r160_in1k"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text("abc123")
    (repo / "snapshots" / "abc123").mkdir(parents=True)
    torch.manual_seed(3)
    save_file(timm.create_model("test_convnext").state_dict(), repo / "snapshots" / "abc123" / "model.safetensors")
    assert cached_weights("test_convnext") == repo / "snapshots" / "abc123" / "model.safetensors"
    result, results = probe_cli("--timm-model", "test_convnext", "--out", tmp_path / "cached")
    assert f"probing timm test_convnext ('{repo}" in result.output and results["feature_dim"] == 64


@pytest.mark.parametrize(
    "args, expected",
    [
        ([], "give --checkpoint CKPT (of `pretexts train`, or an export), --timm-model NAME, or --from-scratch"),
        (["--from-scratch"], "--from-scratch needs --backbone NAME"),
        (["--checkpoint", "x.pt", "--backbone", "resnet18"], "--backbone goes with --from-scratch"),
        (
            ["--from-scratch", "--backbone", "resnet18", "--checkpoint", "x.pt"],
            "leave out --checkpoint and --timm-model",
        ),
        (["--timm-model", "resnet1"], "'resnet1' is no timm model. Did you mean: resnet18"),
        (["--timm-model", "hf-hub:timm/resnet18.a1_in1k"], "nothing is downloaded"),
    ],
)
def test_a_probe_without_one_clear_backbone_is_one_line(tmp_path, args, expected):
    result = CliRunner().invoke(main, ["probe", *args, "--out", str(tmp_path / "p")])
    assert result.exit_code == 2 and expected in result.output and len(result.output.strip().splitlines()) == 1, (
        result.output
    )


def test_a_weights_file_without_its_export_json_asks_for_the_timm_model(tmp_path):
    from safetensors.torch import save_file

    save_file({"w": torch.zeros(1)}, tmp_path / "w.safetensors")
    result = CliRunner().invoke(
        main, ["probe", "--checkpoint", str(tmp_path / "w.safetensors"), "--out", str(tmp_path / "p")]
    )
    assert result.exit_code == 2 and "give --timm-model NAME with it" in result.output


def test_a_k_above_the_training_images_count_says_that_all_of_them_vote():
    """k=200 over 30 training images is k=30: the line says so, and the results hold the bank's size."""
    from pretexts.engine.evaluation.probe import knn_probe

    generator = torch.Generator().manual_seed(0)
    train = (torch.randn(30, 8, generator=generator), torch.randint(0, 3, (30,), generator=generator))
    val = (torch.randn(10, 8, generator=generator), torch.randint(0, 3, (10,), generator=generator))
    results, line = knn_probe(train, val, 3, None, knn_k=(20, 200), knn_temperature=0.07)
    assert line.endswith("(k=200: all 30 training images vote)") and results["bank"] == 30
