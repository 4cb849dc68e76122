"""One short training run in Agent Lightning's step order on the CPU (or a GPU); studies of many runs are
:mod:`agl_lab.studies`.

``tasks`` (the agent task) · ``policy`` (tiny or local model) · ``rollout`` (sampling episodes) · ``actor`` (the PPO
update) · ``trainer`` (the step loop) · ``runs`` (run directories) · ``session`` (a run's files and trackers from start
to end) · ``process_state`` (torch threads, SIGTERM) · ``tracking`` (verl Tracking, W&B) · ``locks`` (one writer per
directory).
"""
