"""Studies over many runs and steps: sweeps of settings × seeds (serial, Ray on the cores or a cluster), the demo,
the prepared reproductions, and the weighting diagnostics of a run; each single run is :mod:`agl_lab.training`'s.

``sweep`` (settings × seeds, Ray or serial) · ``sweep_plan`` (the cells, checked before the first trains) ·
``sweep_cells`` (cell records, resume, the table) · ``sweep_ray`` (cells as Ray tasks) · ``ray_start`` (Ray started
early, warm workers) · ``demo`` (the settings that matter, side by side) · ``experiments`` (the prepared reproductions)
· ``reproduce`` (running and judging them) · ``reproduce_report`` (their reports) · ``weighting_source``
(``weighting_diagnostics`` of a batch or a run, every mode over its steps).
"""
