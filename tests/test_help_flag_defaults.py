"""`--help` shows every default, a flag pair's (--tf32/--no-tf32) as click writes one: the flag that is on."""

import pytest
from click.testing import CliRunner

from pretexts.cli import main


@pytest.mark.parametrize("command", ["train", "finetune", "segment"])
def test_a_flag_pair_on_by_default_shows_its_default(command):
    result = CliRunner().invoke(main, [command, "--help"], terminal_width=100)
    assert result.exit_code == 0, result.output
    joined = " ".join(result.output.split())
    assert "in results.json's arithmetic. [default: tf32]" in joined
    assert "its default kernels. [default: cudnn-benchmark]" in joined
    assert "--force Start over" in joined and "removed). [default" not in joined  # a flag off by default: none
