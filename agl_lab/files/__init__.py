"""Files on disk, written whole and read back: the lowest room but core, whose keys and id grouping it uses.

``atomic_files`` (written whole: temporary file + rename) · ``jsonl`` (every complete line of a JSON-lines file) ·
``batch_io`` (real batches on disk: dumps, the safe format, the sample) · ``batch_header`` (the safe format's header,
checked) · ``run_rows`` (a run's rows as one tidy table) · ``run_readers`` (``read_run``: every source, streamed by
step) · ``run_sessions`` (each step's sessions: one group, one outcome) · ``outcome_rules`` (a session's outcome
from its rows) · ``verl_dump`` (verl's ``trainer.rollout_data_dir``).
"""
