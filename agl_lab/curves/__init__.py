"""Training histories as one long-form table: reading them, bands across seeds, summaries and figures.

``history`` (run directories, W&B offline/online/CSV, verl file logs) · ``wandb_offline`` (W&B's offline run file) ·
``bands`` (mean and band per step) · ``bounds`` (each metric's physical range) · ``summary`` (one line per setting) ·
``effects`` (paired effects over seeds) · ``verdicts`` (their lines and files) · ``forest`` (the forest plot) ·
``figures`` (the history figures).
"""
