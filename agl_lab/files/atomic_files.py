"""Files written whole or not at all: each is written beside its place under a temporary name, then renamed over it.

What a run or a sweep leaves for later — the policy folder, a run's ``status.json``, a sweep cell's ``cell.json``, the
summary tables and figures — must never be found half-written: a reader (the next sweep deciding what to rerun,
``lab.model_path`` loading a policy) would take a torn file for a whole one. So each is written to
``.<name>.<pid>.partial`` in the same folder and renamed over ``<name>`` once complete (a rename within one file
system is atomic): whatever stops the writer (Ctrl-C, SIGTERM, SIGKILL, a full disk), a reader finds the old version
or the new one. A failure removes the temporary file, so none is left behind, and the error names the file meant
(a full disk refusing a write says ``No space left on device: '<path>'``, not the temporary name or nothing).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["partial_path", "write_whole", "written_whole"]


def partial_path(path: str | Path) -> Path:
    """The temporary name ``path`` is written under: ``.<name>.<pid>.partial`` beside it."""
    path = Path(path)
    return path.with_name(f".{path.name}.{os.getpid()}.partial")


@contextmanager
def written_whole(path: str | Path) -> Iterator[Path]:
    """Yield the temporary path to write (a file, or a folder to create); on success it replaces ``path``.

    On any failure, an interrupt included, the temporary file or folder is removed and ``path`` is left as it was;
    an ``OSError`` is raised again naming ``path``. A folder can replace only a missing or empty folder.
    """
    path = Path(path)
    partial = partial_path(path)
    if partial.is_dir() and not partial.is_symlink():  # a folder left by this pid (reused after a SIGKILL); a file
        shutil.rmtree(partial, ignore_errors=True)  # left over is simply truncated when it is opened again
    try:
        yield partial
        os.replace(partial, path)
    except OSError as exc:
        _remove(partial)
        if exc.filename in (None, str(partial)) and exc.errno is not None:
            raise type(exc)(exc.errno, exc.strerror, str(path)) from exc
        raise
    except BaseException:
        _remove(partial)
        raise


def write_whole(path: str | Path, data: str | bytes) -> None:
    """Write ``data`` (text as UTF-8) to ``path`` whole or not at all, flushed to the disk before the rename."""
    with written_whole(path) as partial, open(partial, "wb") as file:
        file.write(data.encode() if isinstance(data, str) else data)
        file.flush()
        os.fsync(file.fileno())


def _remove(path: Path) -> None:
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path, ignore_errors=True)
    else:
        path.unlink(missing_ok=True)
