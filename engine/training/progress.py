"""Progress bars for every long loop (train, finetune, probe): tqdm on stderr, off under --quiet and, by tqdm's
own check, when the output is not a terminal (logs get the one line per epoch the commands print)."""
from tqdm.auto import tqdm


def progress(total: int, desc: str, quiet: bool = False, initial: int = 0, enabled: bool = True) -> tqdm:
    return tqdm(total=total, initial=initial, desc=desc, disable=True if quiet or not enabled else None,
                dynamic_ncols=True, leave=False)
