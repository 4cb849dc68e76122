"""The batch math on verl ``DataProto`` rows, in Agent Lightning's trainer order; nothing here draws, tracks or
starts a cluster.

``rows`` (building and checking rows) · ``row_sums`` (exact per-row sums) · ``groups`` (rows by rollout or uid) ·
``aggregation`` (rollouts → rows) · ``update_cap`` (marked rows, mini-batch alignment, the cap) · ``selection``
(steps 1–2) · ``advantage`` (rollout-level advantage) · ``loss`` (per_rollout_mean normalization and loss) ·
``pipeline`` (steps 1–5) · ``weights`` (per-token loss weights) · ``keys`` (every config key the package reads
and every metric name it logs, spelled once).
"""
