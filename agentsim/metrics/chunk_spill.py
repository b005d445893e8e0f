"""Sealed record chunks kept on disk during a run instead of in memory.

A run's request records are its one store that grows with every request for as long as the run
lasts (the cache's content is bounded by its capacity; the live sessions by the workload).
Sealed into compact chunks (:mod:`agentsim.metrics.compact_columns`) they still take about 150
bytes a request: over a fleet day's 7 million requests, about a gigabyte of the event loop's
peak. Nothing reads a sealed chunk until the run's tables are built, so a :class:`ChunkSpill`
writes each one to an anonymous temporary file as it is sealed and keeps a
:class:`SpilledChunk` (where it is, how many bytes its values take) in its place; building the
tables reads each back once, column by column.

Contract:

* :meth:`ChunkSpill.put` returns a handle whose :meth:`~SpilledChunk.load` gives back a chunk
  equal to the one put (``pickle`` of the chunk's tuple of numpy arrays and labels, written and
  read by this process only: the file is private to it and deleted when closed).
* The file is made on the first ``put`` (in :func:`tempfile.gettempdir`, so ``TMPDIR`` moves
  it): a run too short to seal a chunk never touches the disk. It is unlinked from the start
  (``tempfile.TemporaryFile``), so nothing is left behind however the process ends. Where the
  temporary directory is a RAM-backed ``tmpfs``, the chunks still take memory, only outside the
  process's RSS: point ``TMPDIR`` at a disk for long runs there.
* If the file cannot be made or written (no temporary directory, disk full), ``put`` returns
  the chunk itself and the spill stops for good: the run keeps its chunks in memory as it did
  before, with one warning, rather than failing.
* :meth:`ChunkSpill.close` drops the file and its handles' contents; a closed spill can be put
  to again (a new file).

Why not Parquet: the chunks are read back by this process only, once, field by field, and
their compact forms (one value for a constant chunk, narrow ints, label codes) are smaller than
what a Parquet writer would be handed; pickle round-trips them exactly at no cost to write.
"""

from __future__ import annotations

import pickle
import tempfile
import warnings

from agentsim.metrics.compact_columns import nbytes


class SpilledChunk:
    """Where a sealed chunk is in its spill's file, and the bytes its values take (as
    :func:`~agentsim.metrics.compact_columns.nbytes` of the chunk)."""

    __slots__ = ("spill", "offset", "size", "values_nbytes")

    def __init__(self, spill: "ChunkSpill", offset: int, size: int, values_nbytes: int) -> None:
        self.spill = spill
        self.offset = offset
        self.size = size
        self.values_nbytes = values_nbytes

    def load(self):
        """The chunk as it was put."""
        return self.spill._read(self)


class ChunkSpill:
    """An append-only temporary file of sealed chunks (see the module docstring)."""

    def __init__(self) -> None:
        self._file = None
        self._end = 0
        #: False once a write failed: later chunks stay in memory.
        self.enabled = True

    @property
    def spilled_bytes(self) -> int:
        """Bytes written to the file so far (0 before the first chunk and after :meth:`close`)."""
        return self._end

    def put(self, chunk):
        """A :class:`SpilledChunk` for ``chunk``, or ``chunk`` itself if it cannot be spilled."""
        if not self.enabled:
            return chunk
        data = pickle.dumps(chunk, protocol=pickle.HIGHEST_PROTOCOL)
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="agentsim-records-")
                self._end = 0
            self._file.seek(self._end)
            self._file.write(data)
        except OSError as exc:
            self.enabled = False
            warnings.warn(f"cannot write the run's records to a temporary file ({exc}); keeping them in "
                          "memory", RuntimeWarning, stacklevel=2)
            return chunk
        handle = SpilledChunk(self, self._end, len(data), nbytes(chunk))
        self._end += len(data)
        return handle

    def _read(self, handle: SpilledChunk):
        if handle.spill is not self or self._file is None:
            raise ValueError("the spilled chunk's file was closed")
        self._file.seek(handle.offset)
        data = self._file.read(handle.size)
        if len(data) != handle.size:
            raise OSError(f"the records' temporary file ended early ({len(data)} of {handle.size} bytes)")
        return pickle.loads(data)

    def close(self) -> None:
        """Drop the file (its chunks can no longer be loaded)."""
        if self._file is not None:
            self._file.close()
            self._file = None
        self._end = 0


def loaded(chunk):
    """``chunk`` itself, or what its handle holds if it was spilled."""
    return chunk.load() if type(chunk) is SpilledChunk else chunk


def chunk_nbytes(chunk) -> int:
    """Bytes of the chunk's values, wherever it is held."""
    return chunk.values_nbytes if type(chunk) is SpilledChunk else nbytes(chunk)
