"""Files on disk, written whole and read back: the lowest room, importing no other part of agl_lab.

``atomic_files`` (written whole: temporary file + rename) · ``jsonl`` (every complete line of a JSON-lines file) ·
``batch_io`` (real batches on disk: dumps, the safe format, the sample) · ``run_rows`` (a run's rows as one tidy
table) · ``run_readers`` (``read_run``: every source, streamed by step) · ``verl_dump`` (verl's
``trainer.rollout_data_dir``).
"""
