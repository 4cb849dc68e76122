"""Training histories as one long-form table: reading them, bands across seeds, summaries and figures.

``history`` (run directories, W&B offline/online/CSV, verl file logs) · ``jsonl`` (every complete line of a JSON-lines
file) · ``wandb_offline`` (W&B's offline run file) ·
``bands`` (mean and band per step) · ``summary`` (one line per setting) · ``figures`` (the history figures).
"""
