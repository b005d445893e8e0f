"""Output directories that never lie: staged in a sibling, swapped in whole, locked, fsynced.

A run directory is either absent, the complete previous run, or the complete new run: never a
mix. :class:`StagedDirectory` is the one way results reach ``--out``:

1. **Checked first.** ``--out`` must not be a file, must not be a directory that holds anything
   but a previous run (``--out /``, ``--out .`` or a folder of notes is refused: replacing it
   would delete what is there), and its parent must be writable. All of this is checked, and
   the staging directory created, *before* the simulation starts, so a read-only ``--out`` is
   found in milliseconds instead of after the whole run.
2. **Locked.** An exclusive ``fcntl.flock`` on ``.NAME.lock`` beside the directory (not inside
   it: the directory is replaced) keeps a second writer out; it gets one clear error at once.
   The kernel releases the lock when its process dies, so a killed run never leaves a stale
   lock, and the holder removes the file when done. Staging directories a killed process left
   are removed by the next holder of the lock. (The standard library's ``fcntl`` does all this
   in a few lines; no dependency needed.)
3. **Staged and swapped.** Results are written into ``.NAME.tmp-XXXX`` beside the target, every
   file and the directory fsynced, then exchanged with the old directory in one
   ``renameat2(RENAME_EXCHANGE)`` (Linux) or, where that is missing, two renames; the old
   directory is removed afterwards. ``--force`` therefore replaces the whole directory: no
   stale table of an earlier run survives.
4. **Cleaned up on failure.** If anything fails (disk full, Ctrl-C before the results exist),
   the staging directory is removed and the previous directory is untouched.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import errno
import fcntl
import os
import shutil
import tempfile
from pathlib import Path

from agentsim.errors import InputError
from agentsim.input_files import resolved_path

#: Files whose presence marks a directory as agentsim's own output (a run, a sweep, a plan),
#: which ``--force`` may replace.
OUTPUT_MARKERS = ("summary.json", "error.json", "sweep.json", "plan.json", "cells")
_RENAME_EXCHANGE = 2


def _libc():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    except OSError:
        return None


def _exchange(a: Path, b: Path) -> bool:
    """Atomically swap two paths with renameat2(RENAME_EXCHANGE); False if unsupported here."""
    libc = _libc()
    function = getattr(libc, "renameat2", None) if libc is not None else None
    if function is None:
        return False
    at_fdcwd = -100
    result = function(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), _RENAME_EXCHANGE)
    if result == 0:
        return True
    code = ctypes.get_errno()
    if code in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):  # old kernel or a filesystem without it
        return False
    raise OSError(code, os.strerror(code), str(b))


def fsync_tree(root: Path) -> None:
    """fsync every file and directory under ``root`` (and ``root``), so a crash after the swap
    cannot leave a directory entry pointing at data that never reached the disk."""
    for directory, _, files in os.walk(root):
        for name in files:
            fd = os.open(os.path.join(directory, name), os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        fsync_directory(Path(directory))


def fsync_directory(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def is_output_directory(path: Path) -> bool:
    """True if ``path`` holds agentsim output (see :data:`OUTPUT_MARKERS`)."""
    return any((path / marker).exists() for marker in OUTPUT_MARKERS)


def check_out_dir(out_dir: Path, force: bool, what: str = "a run's results", owned: bool = False) -> None:
    """InputError unless results may be written to ``out_dir`` (see the module docstring).
    ``owned``: the directory is agentsim's by construction (a sweep's ``seed-S/``), whatever
    it holds (a killed run leaves tables without a summary)."""
    source = str(out_dir)
    resolved = resolved_path(out_dir, "output directory")  # a symlink loop or a name too long
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError("exists and is not a directory", source)
    if resolved == Path(resolved.anchor):
        raise InputError("is the filesystem root; choose a directory for the results", source)
    if out_dir.is_dir():
        try:
            entries = [entry.name for entry in os.scandir(out_dir)]
        except OSError as exc:
            raise InputError(f"cannot read the output directory ({exc.strerror})", source) from None
        if entries and not owned and not is_output_directory(out_dir):
            raise InputError(f"holds files that are not agentsim results ({', '.join(sorted(entries)[:3])}"
                             f"{', ...' if len(entries) > 3 else ''}); writing would replace them: choose a new "
                             "or empty --out", source)
        if entries and not force:
            raise InputError(f"already holds {what}; pass --force to replace it or choose another --out", source)


class StagedDirectory:
    """Context manager: lock ``out_dir``, stage into a sibling, :meth:`commit` swaps it in.

    ``staging`` is the directory to write into. Leaving the block without :meth:`commit` (an
    error, an interrupt before results exist) removes the staging directory and leaves
    ``out_dir`` as it was. Errors are :class:`InputError` naming ``out_dir``."""

    def __init__(self, out_dir: str | Path, force: bool, what: str = "a run's results", owned: bool = False):
        self.out_dir = Path(out_dir)
        self.force = force
        self.what = what
        self.owned = owned
        self.staging: Path | None = None
        self._lock_fd: int | None = None
        self._lock_path: Path | None = None

    def __enter__(self) -> "StagedDirectory":
        check_out_dir(self.out_dir, self.force, self.what, self.owned)
        parent = self.out_dir.absolute().parent
        try:
            parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot create the output directory's parent ({exc.strerror})", str(self.out_dir)) from None
        self._lock(parent)
        try:
            check_out_dir(self.out_dir, self.force, self.what, self.owned)  # again, now that no one else writes
            self.staging = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.tmp-", dir=parent))
        except OSError as exc:
            self._unlock()
            raise InputError(f"cannot write the output directory ({exc.strerror})", str(self.out_dir)) from None
        except BaseException:
            self._unlock()
            raise
        return self

    def _lock(self, parent: Path) -> None:
        path = parent / f".{self.out_dir.name}.lock"
        while True:
            try:
                fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
            except OSError as exc:
                raise InputError(f"cannot write the output directory ({exc.strerror})", str(self.out_dir)) from None
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                raise InputError("another agentsim process is writing to this directory; wait for it or choose "
                                 "another --out", str(self.out_dir)) from None
            try:
                same = os.fstat(fd).st_ino == os.stat(path).st_ino
            except FileNotFoundError:
                same = False
            if same:
                break
            os.close(fd)  # the holder removed the file as we opened it: take the new one
        self._lock_fd, self._lock_path = fd, path
        # Staging directories of a process that was killed (SIGKILL, power loss): ours now.
        for stale in parent.glob(f".{self.out_dir.name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)
        for stale in parent.glob(f".{self.out_dir.name}.old-*"):
            shutil.rmtree(stale, ignore_errors=True)

    def _unlock(self) -> None:
        # Unlinked while still held, so a process that opened the old file sees it gone and
        # retries on a fresh one instead of sharing the lock.
        if self._lock_fd is not None:
            try:
                os.unlink(self._lock_path)
            except OSError:
                pass
            os.close(self._lock_fd)
            self._lock_fd = None

    def commit(self) -> Path:
        """fsync the staged files and put them in place of ``out_dir`` in one step."""
        assert self.staging is not None, "commit() outside the with block"
        try:
            fsync_tree(self.staging)
            if self.out_dir.exists():
                if not _exchange(self.staging, self.out_dir):
                    old = Path(tempfile.mkdtemp(prefix=f".{self.out_dir.name}.old-", dir=self.staging.parent))
                    os.replace(self.out_dir, old / "previous")
                    os.replace(self.staging, self.out_dir)
                    self.staging = old
                # self.staging now holds the previous directory.
            else:
                os.replace(self.staging, self.out_dir)
                self.staging = None
            fsync_directory(self.out_dir.absolute().parent)
        except OSError as exc:
            raise InputError(f"cannot write results ({exc.strerror}); the previous contents are unchanged",
                             str(self.out_dir)) from None
        return self.out_dir

    def __exit__(self, *exc_info) -> None:
        try:
            if self.staging is not None:
                shutil.rmtree(self.staging, ignore_errors=True)
                self.staging = None
        finally:
            self._unlock()
