"""An --out that holds another run, refused before a command reads its data and says its start line, in the words
of the claim the run makes as it starts (`run_folder.claim_output_dir`)."""

from pathlib import Path

from pretexts.engine.training.run_folder import LOCK_FILE, claim_output_dir, never_saved, run_files_in


def refuse_taken_output_dir(out, resume: str | None, force: bool, inputs=()) -> None:
    """Refuse `out` now where the claim would refuse it later. What the claim continues or removes (--resume of the
    folder's checkpoint, --force, a run that stopped before saving) and a folder being written (its lock names the
    writer) are left to the claim, made under the folder's lock: nothing is removed or written here."""
    found = run_files_in(Path(out))
    if not found or force or never_saved(Path(out), found) or (Path(out) / LOCK_FILE).exists():
        return
    # with these files and no --force, the claim either refuses or returns at once (a resume): it removes nothing
    claim_output_dir(out, resume, False, inputs=[*inputs, resume])
