"""The notebooks' widget panels: compute and render in the package, wiring in the notebooks.

``controls`` (shared settings controls) · ``live_figure`` (plotly.js figures moved by one message) · ``gc_pauses``
(short garbage-collection pauses) · ``weighting_panel`` (notebook 01) · ``config_panel`` (notebook 02) ·
``training_panel`` (notebook 03) · ``curve_view`` (notebooks 03 and 04).
"""
