"""The log on disk: a file of JSON lines, one event each, appended as events happen, and beside
it, while its process runs, the running sums that process keeps (``<log>.sums``).

``LogWriter`` appends one line per event with one ``write`` on a file opened ``O_APPEND``: the
operating system keeps every byte written when the process is killed, so a log holds everything
its process emitted up to its death. Sums that grow with the steps (the later calls of a compiled
graph, the later syncs of a call site) are not appended step by step: the writer rewrites them,
whole, into the sums file (``rewrite_sums``: a new file renamed over the old, so that a reader
finds the old sums or the new, never half of them); at a normal end the final sums are appended to
the log and the sums file is removed (``close()``).

``read_log`` reads a log and its sums file as far as they can be read: a line cut short (the
process died writing it, or is writing it now), a line that is not JSON or not an event, a field of
the wrong type, an event type or a schema this version does not know: each is said in
``LogContents.warnings``, naming the file and line, and the reading goes on.
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

from xlabridge.diagnostics.events._base import SCHEMA, Event, EventType
from xlabridge.diagnostics.events._json import from_dict, to_dict

SUMS_SUFFIX = ".sums"
"""The running sums of ``events-123.jsonl`` are in ``events-123.jsonl.sums``."""


def sums_path(log: str | os.PathLike[str]) -> Path:
    """The file of ``log``'s running sums."""
    log = Path(log)
    return log.with_name(log.name + SUMS_SUFFIX)


def _line(event: Event) -> bytes:
    return (json.dumps(to_dict(event)) + "\n").encode("utf-8")


def write_log(events: Iterable[Event], path: str | os.PathLike[str]) -> Path:
    """Write ``events`` to ``path`` as JSON lines (replacing what it held); returns the path."""
    path = Path(path)
    with path.open("wb") as out:
        for event in events:
            out.write(_line(event))
    return path


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


class LogWriter:
    """Appends events to a log as they happen, one ``write`` per line, under a lock.

    ``fresh``: start the log empty (a new observation); otherwise append to what it holds (a
    ``process_exit`` written by the process that waited for the log's process). Only the process
    that opened the writer writes through it: a child made by ``fork`` has a copy of the writer,
    and its events are not this log's. Re-entrant: a signal handler that runs between two lines of
    the main thread may write its own.
    """

    def __init__(self, path: str | os.PathLike[str], *, fresh: bool = True) -> None:
        self.path = Path(path)
        flags = os.O_WRONLY | os.O_CREAT | os.O_APPEND | (os.O_TRUNC if fresh else 0)
        self._fd: int | None = os.open(self.path, flags, 0o644)
        self._pid = os.getpid()
        self._lock = threading.RLock()
        if fresh:
            sums_path(self.path).unlink(missing_ok=True)

    def _mine(self) -> bool:
        return self._fd is not None and os.getpid() == self._pid

    def write(self, event: Event) -> None:
        """Append ``event``'s line."""
        data = _line(event)
        with self._lock:
            if self._mine():
                _write_all(self._fd, data)

    def rewrite_sums(self, events: Iterable[Event]) -> None:
        """Replace the log's sums file by ``events``: written aside, then renamed over it."""
        data = b"".join(_line(event) for event in events)
        target = sums_path(self.path)
        scratch = target.with_name(f"{target.name}.{os.getpid()}.tmp")
        with self._lock:
            if not self._mine():
                return
            with scratch.open("wb") as out:
                out.write(data)
            os.replace(scratch, target)

    def close(self, *, ended: bool = True) -> None:
        """Stop writing. ``ended``: the log's process ended its observation normally, its final sums
        are in the log, and the sums file goes; ``False`` (a ``process_exit`` appended by the waiting
        process) leaves it for readers."""
        with self._lock:
            if self._mine():
                if ended:
                    sums_path(self.path).unlink(missing_ok=True)
                os.close(self._fd)
            self._fd = None

    def forget(self) -> None:
        """Stop writing without touching the file (a child made by ``fork`` drops its parent's writer)."""
        self._fd = None


@dataclasses.dataclass
class LogContents:
    """What ``read_log`` found: the events it could read, and what it could not."""

    events: list[Event]
    skipped: int = 0
    """Events of types this version does not know (left out, not an error)."""
    unknown_types: list[str] = dataclasses.field(default_factory=list)
    """Those types, each once."""
    warnings: list[str] = dataclasses.field(default_factory=list)
    """What could not be read, each naming the file and line."""
    lines: int = 0
    """Non-blank lines in the log and its sums file."""
    unreadable: int = 0
    """Lines left out with a warning: ``len(events) + skipped + unreadable == lines``."""
    schema: str = ""
    """The schema the log's ``process_start`` names (``""``: none read)."""


def iter_lines(path: str | os.PathLike[str]) -> Iterator[dict[str, Any]]:
    """The JSON objects of a log, one per non-empty line; ``ValueError`` naming the file and line at
    the first line that is not one (``read_log`` reads past such lines instead)."""
    with Path(path).open(encoding="utf-8") as lines:
        for number, line in enumerate(lines, start=1):
            if line.strip():
                try:
                    data = json.loads(line)
                except json.JSONDecodeError as error:
                    raise ValueError(f"{path}:{number}: not a JSON line ({error.msg})") from None
                if not isinstance(data, dict):
                    raise ValueError(f"{path}:{number}: not an event (a JSON {type(data).__name__})")
                yield data


def read_log(path: str | os.PathLike[str], *, sums: bool = True) -> LogContents:
    """Read a log (``LogWriter``'s, ``write_log``'s) as far as it can be read, and with ``sums`` the
    running sums beside it (``sums_path``: a process that has not ended, or did not end normally,
    left its latest sums there). Never raises for what the files hold; ``OSError`` if the log
    cannot be opened."""
    contents = LogContents(events=[])
    extra = sums_path(path)
    # the sums first: a process that ends now appends its final sums to the log and then removes
    # them, so a log read after its sums holds the final ones if the sums were already gone
    running = None
    if sums:
        try:
            running = extra.read_bytes()
        except FileNotFoundError:
            pass
        except OSError as error:
            contents.warnings.append(f"{extra}: not read ({error.strerror or error})")
    _read_into(contents, Path(path), Path(path).read_bytes())
    if running is not None:
        _read_into(contents, extra, running)
    return contents


def _read_into(contents: LogContents, path: Path, data: bytes) -> None:
    pieces = data.split(b"\n")
    unterminated = not data.endswith(b"\n")
    warned_schema = False
    unknown: dict[str, None] = dict.fromkeys(contents.unknown_types)
    for number, raw in enumerate(pieces, start=1):
        if not raw.strip():
            continue
        contents.lines += 1
        cut_short = unterminated and number == len(pieces)

        def warn(why: str) -> None:
            contents.unreadable += 1
            contents.warnings.append(f"{path}:{number}: {why}; left out")

        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            warn("cut short (the process died while writing it, or is writing it now)" if cut_short
                 else "not UTF-8 text")
            continue
        try:
            item = json.loads(text)
        except (json.JSONDecodeError, RecursionError) as error:
            why = getattr(error, "msg", type(error).__name__)
            warn("cut short (the process died while writing it, or is writing it now)" if cut_short
                 else f"not a JSON line ({why})")
            continue
        if not isinstance(item, dict):
            warn(f"not an event (a JSON {type(item).__name__})")
            continue
        kind = item.get("type")
        if not isinstance(kind, str):
            warn("not an event (no 'type' tag)")
            continue
        if kind == EventType.PROCESS_START.value:
            schema = item.get("schema", SCHEMA)
            contents.schema = schema if isinstance(schema, str) else repr(schema)
            if schema != SCHEMA and not warned_schema:
                warned_schema = True
                contents.warnings.append(
                    f"{path}:{number}: written with event schema {schema!r}; this xlabridge reads {SCHEMA!r}: "
                    "read as far as it can be (fields it does not know ignored, event types it does not know "
                    "skipped)")
        try:
            event = from_dict(item)
        except Exception as error:  # noqa: BLE001 - any damage to one line costs that line only
            warn(f"a {kind!r} event this xlabridge cannot read ({type(error).__name__}: {error})"[:600])
            continue
        if event is None:
            contents.skipped += 1
            unknown.setdefault(kind[:80], None)
            continue
        contents.events.append(event)
    contents.unknown_types = list(unknown)
