"""The notebooks' widget panels: compute and render in the package, wiring in the notebooks.

``controls`` (shared settings controls, live figures) · ``weighting_panel`` (notebook 01) · ``config_panel``
(notebook 02) · ``training_panel`` (notebook 03).
"""
