"""Short training runs in Agent Lightning's step order on the CPU (or a GPU), and sweeps of them.

``tasks`` (the agent task) · ``policy`` (tiny or local model) · ``rollout`` (sampling episodes) · ``actor`` (the PPO
update) · ``trainer`` (the step loop) · ``runs`` (run directories) · ``session`` (a run's files and trackers from start
to end) · ``process_state`` (torch threads, SIGTERM) · ``tracking`` (verl Tracking, W&B) · ``locks`` (one writer per
directory) · ``sweep`` (settings × seeds, Ray or serial) · ``sweep_cells`` (cell records, resume, the table) ·
``demo`` (the settings that matter, side by side) · ``experiments`` (the prepared reproductions) · ``reproduce``
(running and judging them) · ``reproduce_report`` (their reports).
"""
