"""Progress that reads well on a terminal and in a log: every progress bar of the library.

On a terminal, :func:`progress_bar` is tqdm's bar, redrawn in place; anywhere else it is
:class:`LineBar`, the same counts as plain lines (``extract causal: 96/512 (19%) [00:41<03:00,
2.31seq/s]``) at most every :data:`LOG_INTERVAL_S` seconds. Other libraries' bars write ``\\r``
frames whatever their stream; in a job's log (:func:`causalpos.io.runlog.logged`)
:class:`LineFrames` keeps a bar's last frame (and one per interval of a long one) as a line.
"""

from __future__ import annotations

import functools
import re
import sys
import threading
import time
from collections.abc import Iterable
from typing import IO, Any

#: Seconds between two progress lines in a log (the first and the last are always written).
LOG_INTERVAL_S = 10.0

#: A :class:`LineBar`'s line where the total is known (otherwise tqdm's own, which has no bar).
LINE_FORMAT = (
    "{desc}: {n_fmt}/{total_fmt} ({percentage:.0f}%) [{elapsed}<{remaining}, {rate_fmt}{postfix}]"
)


def is_terminal(stream: Any) -> bool:
    """Whether ``stream`` is a terminal (False for a file, a pipe, a stream without ``isatty``)."""
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # no isatty, or a closed file
        return False


@functools.cache
def _line_bar_class():
    from tqdm import tqdm

    class _LineBar(tqdm):
        """tqdm writing whole lines instead of redrawing one (see :class:`LineBar`)."""

        def __init__(self, *args, interval_s: float = LOG_INTERVAL_S, **kwargs):
            self._line_clock = time.monotonic
            self._line_last: tuple[float, str] | None = None  # (when, what) was last written
            self._line_interval = float(interval_s)
            kwargs["mininterval"] = float(interval_s)
            super().__init__(*args, **kwargs)
            self.leave = False  # close() writes the last line itself (display, below)

        def display(self, msg=None, pos=None):
            if msg is not None:  # tqdm clearing the line (leave=False): nothing to clear here
                return False
            self._write_line(final=False)
            return True

        def _write_line(self, *, final: bool) -> None:
            now, state = self._line_clock(), f"{self.n}/{self.total} {self.postfix}"
            last = self._line_last
            if last is not None and (
                (final and last[1] == state) or (not final and now - last[0] < self._line_interval)
            ):
                return
            self._line_last = (now, state)
            self.fp.write(self.__str__().rstrip() + "\n")
            getattr(self.fp, "flush", lambda: None)()

        def close(self):
            if not getattr(self, "disable", True) and hasattr(self, "sp"):
                with self._lock:
                    self._ema_dt = lambda: None  # the overall rate, as tqdm's last frame
                    self._write_line(final=True)
            super().close()

    return _LineBar


def LineBar(*args, **kwargs):  # noqa: N802 - a class, built on first use (tqdm imported then)
    """A tqdm bar whose every update is a line of its own: written when it starts, then at most
    every ``interval_s`` seconds (:data:`LOG_INTERVAL_S`), and its final count when it closes
    (unless that line was the last one written). Takes tqdm's arguments."""
    return _line_bar_class()(*args, **kwargs)


def progress_bar(
    iterable: Iterable | None = None,
    *,
    total: int | None = None,
    desc: str = "",
    unit: str = "it",
    file: IO[str] | None = None,
    disable: bool = False,
    interval_s: float = LOG_INTERVAL_S,
):
    """A progress bar over ``iterable`` (or updated by hand: ``update(n)``, ``close()``) on
    ``file`` (default: ``sys.stderr`` now): tqdm's bar on a terminal, :class:`LineBar`'s lines
    (at most one every ``interval_s`` seconds) anywhere else; ``disable``: none at all."""
    from tqdm import tqdm

    file = sys.stderr if file is None else file
    if total is None and iterable is not None and hasattr(iterable, "__len__"):
        total = len(iterable)
    kwargs = {"total": total, "desc": desc, "unit": unit, "file": file, "disable": disable}
    if disable or is_terminal(file):
        return tqdm(iterable, **kwargs)
    bar_format = LINE_FORMAT if total is not None else None
    return LineBar(iterable, bar_format=bar_format, interval_s=interval_s, **kwargs)


_BREAKS = re.compile(r"(\r\n|\r|\n)")


class LineFrames:
    """A text stream over ``out`` (a log file) on which ``\\r``-redrawn progress frames become
    lines. Text between a ``\\r`` and the next ``\\r`` or newline is a frame, held back: one a
    newline ends is written (a bar's last frame); one the next frame replaces only if it is the
    first since a bar's end or ``interval_s`` have passed since the last written; blank ones
    never. Other text passes as it is; :meth:`finish` writes a frame still held. Anything not a
    write is ``out``'s; ``isatty`` is False."""

    def __init__(self, out: IO[str], interval_s: float = LOG_INTERVAL_S, clock=time.monotonic):
        self._out = out
        self._interval = float(interval_s)
        self._clock = clock
        self._frame: str | None = None  # the frame being drawn (None: not in one)
        self._written = -float("inf")  # when a replaced frame was last written
        self._mid_line = False  # the last text written did not end its line
        self._lock = threading.Lock()

    def __getattr__(self, name: str):
        return getattr(self._out, name)

    def isatty(self) -> bool:
        return False

    def _emit(self, text: str) -> None:
        if text:
            self._out.write(text)
            self._mid_line = not text.endswith("\n")

    def _end_frame(self, replaced: bool) -> None:
        frame, self._frame = self._frame, None
        if frame is None or not frame.strip():
            return
        if replaced:
            now = self._clock()
            if now - self._written < self._interval:
                return
            self._written = now
        else:  # a bar's end: the next bar's first frame is written
            self._written = -float("inf")
        self._emit(frame.rstrip() + "\n")

    def write(self, text: str) -> int:
        with self._lock:
            for piece in _BREAKS.split(text):
                if piece == "\r":
                    if self._frame is not None:
                        self._end_frame(replaced=True)
                    elif self._mid_line:
                        self._emit("\n")
                    self._frame = ""
                elif piece in ("\n", "\r\n"):
                    if self._frame is not None:
                        self._end_frame(replaced=False)
                    else:
                        self._emit("\n")
                elif self._frame is not None:
                    self._frame += piece
                else:
                    self._emit(piece)
        return len(text)

    def writelines(self, lines: Iterable[str]) -> None:
        for line in lines:
            self.write(line)

    def finish(self) -> None:
        """Write the frame still held, if any, as a line; flush."""
        with self._lock:
            if self._frame is not None:
                self._end_frame(replaced=False)
        self._out.flush()
