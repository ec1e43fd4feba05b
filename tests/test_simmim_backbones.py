"""SimMIM's mask token replaces a ViT's, Swin's, ConvNeXt's or ResNet's stem output: another family is refused in
the CLI's one error line, naming what to use instead."""

from cli_runs import ONE_STEP, fails_cleanly, one_torch_thread  # noqa: F401 (a fixture)


def test_simmim_on_an_unsupported_backbone_is_one_error_line(tmp_path):
    args = [*ONE_STEP, "--method", "simmim", "--backbone", "test_efficientnet", "--out", tmp_path / "run"]
    fails_cleanly(args, "method simmim needs a ViT, Swin, ConvNeXt or ResNet", "EfficientNet", "--method ae")
