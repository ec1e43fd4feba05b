"""`python -m pretexts` is the `pretexts` command (also under torchrun)."""

from .cli import main

if __name__ == "__main__":
    main()
