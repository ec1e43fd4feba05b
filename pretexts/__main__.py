"""`python -m pretexts` is the `pretexts` command (also under torchrun)."""

import os
import sys

# `python -m` puts the working directory first on sys.path, so a yaml.py (or torch.py) lying there would be imported
# in place of the library; the `pretexts` console script does not, and neither does this. Only that entry is
# dropped: the package itself was found before this file ran.
if not sys.flags.safe_path and sys.path and os.path.abspath(sys.path[0] or os.curdir) == os.getcwd():
    del sys.path[0]

from .cli import main  # noqa: E402 - after the working directory left sys.path

if __name__ == "__main__":
    main()
