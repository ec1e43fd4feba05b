"""The built-in pretext tasks, one module per family. `TASKS` imports every module here on first use, so a new
task is one file in this folder."""
