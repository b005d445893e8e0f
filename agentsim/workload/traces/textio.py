"""Opening trace files: gzip or plain (detected from the magic bytes), streamed as text lines.

Every decoding problem (truncated gzip, corrupt deflate data, bytes that are not UTF-8, an
empty file) becomes an :class:`~agentsim.errors.InputError` naming the file and, where known,
the line.
"""

from __future__ import annotations

import gzip
import io
import json
import re
import zlib
from pathlib import Path
from typing import Iterator

import orjson

from agentsim.errors import InputError
from agentsim.input_files import require_regular_file

GZIP_MAGIC = b"\x1f\x8b"
#: Bytes of decompressed text looked at to detect a format.
PEEK_BYTES = 1 << 16


def _open_binary(path: Path):
    if path.exists() and not path.is_dir():
        # A named pipe would block open() until a writer comes and a device never ends.
        require_regular_file(path, "trace file")
    try:
        raw = open(path, "rb")
    except FileNotFoundError:
        raise InputError("trace file not found", str(path)) from None
    except IsADirectoryError:
        raise InputError("expected a file, got a directory", str(path)) from None
    except OSError as exc:
        raise InputError(f"cannot open trace: {exc.strerror}", str(path)) from None
    magic = raw.read(2)
    raw.seek(0)
    if magic == GZIP_MAGIC:
        return gzip.GzipFile(fileobj=raw, mode="rb")
    return raw


def _decode_error(path: Path, exc: BaseException, line: int | None) -> InputError:
    where = f"line {line}" if line else None
    if isinstance(exc, EOFError):
        return InputError("truncated gzip file (compressed data ends early)", str(path), where)
    if isinstance(exc, (gzip.BadGzipFile, zlib.error)):
        return InputError(f"corrupt gzip data ({exc})", str(path), where)
    if isinstance(exc, UnicodeDecodeError):
        return InputError("not a text trace (bytes are not UTF-8; binary file?)", str(path), where)
    return InputError(f"cannot read trace ({exc})", str(path), where)


_DECODE_ERRORS = (EOFError, gzip.BadGzipFile, zlib.error, UnicodeDecodeError, OSError)


def iter_lines(path: str | Path) -> Iterator[tuple[int, str]]:
    """Yield ``(line_number, text)`` for every non-blank line (1-based numbers), streamed.
    Every reader here decodes ``utf-8-sig``: a byte-order mark that Windows tools put before
    the first record is dropped (it made the first line "not JSON"); elsewhere it is UTF-8.

    Raises InputError for an empty file (no non-blank line) and for decoding problems.
    """
    path = Path(path)
    lineno = 0
    seen = False
    with _open_binary(path) as binary:
        text = io.TextIOWrapper(binary, encoding="utf-8-sig", errors="strict", newline=None)
        try:
            for lineno, line in enumerate(text, 1):
                if line.strip():
                    seen = True
                    yield lineno, line
        except _DECODE_ERRORS as exc:
            raise _decode_error(path, exc, lineno + 1) from None
    if not seen:
        raise InputError("empty trace (no records)", str(path))


def read_text(path: str | Path) -> str:
    """The whole decompressed text of one (session-sized) file."""
    path = Path(path)
    with _open_binary(path) as binary:
        try:
            data = binary.read()
            text = data.decode("utf-8-sig")
        except _DECODE_ERRORS as exc:
            raise _decode_error(path, exc, None) from None
    if not text.strip():
        raise InputError("empty trace (no records)", str(path))
    return text


def peek_text(path: str | Path, n_bytes: int = PEEK_BYTES) -> str:
    """Up to ``n_bytes`` of decompressed text from the start of the file (for detection)."""
    path = Path(path)
    with _open_binary(path) as binary:
        try:
            data = binary.read(n_bytes)
        except _DECODE_ERRORS as exc:
            raise _decode_error(path, exc, None) from None
    try:
        text = data.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        # A multi-byte character may be cut at the end of a full peek window; anything
        # else is not UTF-8 text.
        if len(data) == n_bytes and exc.start >= len(data) - 3:
            text = data[:exc.start].decode("utf-8-sig")
        else:
            raise _decode_error(path, exc, None) from None
    if "\x00" in text:
        raise InputError("not a text trace (binary data)", str(path))
    if not text.strip():
        raise InputError("empty trace (no records)", str(path))
    return text


class DuplicateKeyError(ValueError):
    """A JSON object names ``key`` twice; json and orjson both keep the last value silently."""

    def __init__(self, key: str):
        super().__init__(key)
        self.key = key


def unique_pairs(pairs: list[tuple[str, object]]) -> dict:
    """``object_pairs_hook`` for :func:`json.loads`: the object as a dict, or
    :class:`DuplicateKeyError` when a key repeats (which of two values a record means is a guess)."""
    record = dict(pairs)
    if len(record) != len(pairs):
        seen: set[str] = set()
        raise DuplicateKeyError(next(key for key, _ in pairs if key in seen or seen.add(key)))
    return record


def _line_of_duplicate(text: str, key: str) -> str:
    """``line N`` of the second ``"key":`` in ``text`` (the repeat), or ``line 1``."""
    matches = list(re.finditer(re.escape(json.dumps(key)) + r"\s*:", text))
    offset = matches[1].start() if len(matches) > 1 else 0
    return f"line {text.count(chr(10), 0, offset) + 1}"


def duplicate_key_error(exc: DuplicateKeyError, text: str, path: Path | str, where: str | None = None) -> InputError:
    """The InputError for ``exc`` raised while parsing ``text``: at ``where``, or (``None``)
    the line of the repeated key in ``text``."""
    return InputError(f"duplicate key {exc.key!r} in one JSON object (which of its values is meant?)",
                      str(path), _line_of_duplicate(text, exc.key) if where is None else where)


def loads_json(text: str, path: Path | str, where: str | None) -> object:
    """``json.loads(text)``; malformed or too deeply nested JSON, or an object with a repeated
    key, is an InputError at ``where`` (``None``: the line in ``text``).

    The standard decoder recurses once per nesting level, so ``[[[[...]]]]`` 200,000 deep raises
    RecursionError; no trace record nests more than a few levels."""
    try:
        return json.loads(text, object_pairs_hook=unique_pairs)
    except json.JSONDecodeError as exc:
        raise InputError(f"malformed JSON ({exc.msg} at column {exc.colno})", str(path),
                         f"line {exc.lineno}" if where is None else where) from None
    except DuplicateKeyError as exc:
        raise duplicate_key_error(exc, text, path, where) from None
    except RecursionError:
        raise InputError("JSON nested too deeply to be a trace record", str(path), where) from None


def parse_json_line(path: Path | str, lineno: int, line: str) -> dict:
    """Parse one JSONL record; it must be a JSON object.

    orjson parses a Mooncake line about twice as fast as the standard library (trace reading is
    most of a cache-only ``agentsim replay``). A line orjson refuses (it also refuses nesting
    deeper than 1,024) is parsed again by the standard library, which accepts what orjson does
    not (``NaN``, integers beyond 64 bits: the field checks then name the field) and words the
    error exactly as before. A key given twice in one object is an error too (both parsers keep
    the last value without a word).
    """
    try:
        record = orjson.loads(line)
    except orjson.JSONDecodeError:
        record = loads_json(line, path, f"line {lineno}")
    if not isinstance(record, dict):
        raise InputError(f"expected a JSON object, got {type(record).__name__}", str(path), f"line {lineno}")
    # Every key-value pair needs a colon, so a line with no more colons than the record has keys
    # repeats no key (a flat Mooncake line: the usual case, no second parse); otherwise the
    # standard decoder looks for a repeat.
    if line.count(":") > len(record):
        loads_json(line, path, f"line {lineno}")
    return record
