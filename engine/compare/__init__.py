"""`pretexts compare`, a room above evaluation: it pretrains (the training loop), probes and fine-tunes
(evaluation) every pair of a comparison and ranks them. config.py (`CompareConfig`), plan.py (the estimate and the
ETA), cells.py (one pair and seed, cached), inputs.py (the probes' images, decoded once), ties.py (when rows
cannot be told apart), report.py (the full table, CSV and plot), terminal.py (the table within 100 columns),
run.py (`compare`)."""
