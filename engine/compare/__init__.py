"""`pretexts compare`, a room above evaluation: it pretrains (the training loop), probes and fine-tunes
(evaluation) every pair of a comparison and ranks them. config.py (`CompareConfig`), cells.py (one pair and seed,
cached), report.py (the ranked table and plot), run.py (`compare`)."""
