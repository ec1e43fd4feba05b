"""MAE's decoder heads must divide its width: heads given that do not are refused in one line naming those that do
(not a traceback from inside attention); auto heads beside a width given are chosen to divide it."""

from cli_runs import fails_cleanly, run_cli

# timm's 0.4M-parameter ViT (width 64: the decoder's auto width is 64, its auto heads 2), two steps
MAE = ["train", "--method", "mae", "--backbone", "test_vit", "--batch-size", "8", "--epochs", "1"]
MAE += ["--max-steps-per-epoch", "2", "--eval-images", "8", "--monitor-every", "0", "--workers", "0"]


def test_heads_given_that_do_not_divide_the_width_are_refused_naming_those_that_do(tmp_path):
    fails_cleanly(
        [*MAE, "--method-arg", "decoder_heads=5", "--out", tmp_path / "a"],
        "decoder_heads 5 does not divide the decoder width 64 (auto for an encoder of width 64)",
        "give decoder_heads one of 1, 2, 4, 8, 16, 32, 64, or a decoder_dim divisible by 20",
    )
    fails_cleanly(
        [*MAE, "--method-arg", "decoder_dim=100", "--method-arg", "decoder_heads=3", "--out", tmp_path / "b"],
        "decoder_heads 3 does not divide the decoder width 100;",
        "one of 1, 2, 4, 5, 10, 20, 25, 50, or a decoder_dim divisible by 12",
    )
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_auto_heads_beside_a_width_given_divide_it(tmp_path):
    """vit_tiny's auto width 96 has 3 heads; beside a width of 100 auto takes 2 (the largest count up to 100 / 32
    that divides it), and a width they divide keeps them."""
    from pretexts.engine.methods.mae_model import decoder_sizes

    assert decoder_sizes(192, 100, None, None) == (100, 2, 2)
    assert decoder_sizes(192, 96, None, None) == (96, 2, 3) and decoder_sizes(192, None, None, None)[2] == 3
    args = [*MAE, "--backbone", "vit_tiny", "--method-arg", "decoder_dim=100", "--out", tmp_path / "r"]
    result, error = run_cli(args)
    assert result.exit_code == 0, result.output


def test_vit_b_and_wider_get_maes_own_decoder_and_smaller_vits_a_scaled_one():
    """facebookresearch/mae's dec512d8b for ViT-B and ViT-L; ViT-S a 2-block decoder of half its width."""
    from pretexts.engine.methods.mae_model import decoder_sizes

    assert decoder_sizes(768, None, None, None) == (512, 8, 16)
    assert decoder_sizes(1024, None, None, None) == (512, 8, 16)
    assert decoder_sizes(384, None, None, None) == (192, 2, 6)
