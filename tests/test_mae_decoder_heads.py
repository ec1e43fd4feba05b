"""MAE's decoder heads must divide its width: heads that do not, given or auto's beside a width given, are refused in
one line naming those that do (not a traceback from inside attention)."""

from cli_runs import fails_cleanly

# timm's 0.4M-parameter ViT (width 64: the decoder's auto width is 64, its auto heads 2), two steps
MAE = ["train", "--method", "mae", "--backbone", "test_vit", "--batch-size", "8", "--epochs", "1"]
MAE += ["--max-steps-per-epoch", "2", "--eval-images", "8", "--monitor-every", "0", "--workers", "0"]


def test_heads_given_that_do_not_divide_the_width_are_refused_naming_those_that_do(tmp_path):
    fails_cleanly(
        [*MAE, "--method-arg", "decoder_heads=5", "--out", tmp_path / "a"],
        "decoder_heads 5 does not divide the decoder width 64 (auto: half the encoder's 64, within 64-512)",
        "give decoder_heads one of 1, 2, 4, 8, 16, 32, 64, or a decoder_dim divisible by 20",
    )
    fails_cleanly(
        [*MAE, "--method-arg", "decoder_dim=100", "--method-arg", "decoder_heads=3", "--out", tmp_path / "b"],
        "decoder_heads 3 does not divide the decoder width 100;",
        "one of 1, 2, 4, 5, 10, 20, 25, 50, or a decoder_dim divisible by 12",
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_a_width_given_that_the_auto_heads_do_not_divide_is_refused(tmp_path):
    fails_cleanly(  # vit_tiny: the auto width 96 has 3 heads
        [*MAE, "--backbone", "vit_tiny", "--method-arg", "decoder_dim=100", "--out", tmp_path / "run"],
        "decoder_heads 3 (auto: the auto width 96 / 32) does not divide the decoder width 100;",
        "give decoder_heads one of 1, 2, 4, 5, 10, 20, 25, 50",
    )
