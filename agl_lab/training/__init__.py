"""Short training runs in Agent Lightning's step order on the CPU (or a GPU), and sweeps of them.

``tasks`` (the agent task) · ``policy`` (tiny or local model) · ``rollout`` (sampling episodes) · ``actor`` (the PPO
update) · ``trainer`` (the step loop) · ``runs`` (run directories) · ``tracking`` (verl Tracking, W&B) · ``sweep``
(settings × seeds, Ray or serial) · ``demo`` (the settings that matter, side by side).
"""
