"""Batches to study and how much each rollout weighs in them.

``examples`` (hand-built batches) · ``synthetic`` (seeded agent episodes through trace aggregation) ·
``weighting`` (the weighting analysis) · ``class_stats`` (per rows-per-rollout class) ·
``figures`` (the weighting figures).
"""
