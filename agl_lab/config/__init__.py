"""One config tree and what it means: composition, the catalogues, the doctor and the hand-off.

``compose`` (verl ppo_trainer → Agent Lightning's defaults → ``lab:`` → overrides → dotlist; the short-run preset;
YAML in ``conf/``) · ``lab_config`` (the ``lab:`` section) · ``tree`` (walking a config) · ``dotlist`` (Hydra
overrides as text) · ``modes`` (the loss-mode catalogue) · ``settings`` (the three settings and the demo's) ·
``doctor`` (findings with fixes) · ``checks`` (the doctor's checks of single values) · ``key_types`` (the type of
every key) · ``handoff`` (export to Agent Lightning) · ``secrets`` (redaction).
"""
