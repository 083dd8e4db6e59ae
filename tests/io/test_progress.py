"""causalpos.io.progress: progress bars redrawn on a terminal, plain lines in a log; other
libraries' ``\\r`` frames turned into lines in a job's log."""

from __future__ import annotations

import io
import re

from tqdm import tqdm

from causalpos.io.progress import LineBar, LineFrames, is_terminal, progress_bar


class Terminal(io.StringIO):
    """A stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


def test_on_a_file_the_bar_is_plain_lines_first_and_last_count():
    buf = io.StringIO()
    for _ in progress_bar(range(5), desc="demo", unit="seq", file=buf, interval_s=1e9):
        pass
    text = buf.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    # the start and the end; nothing between within the interval
    assert [line.split(" [")[0] for line in lines] == ["demo: 0/5 (0%)", "demo: 5/5 (100%)"]
    assert lines[1].endswith("seq/s]")


def test_a_line_at_most_every_interval_and_the_final_count_once():
    buf = io.StringIO()
    bar = LineBar(total=4, desc="x", file=buf, interval_s=1e9, bar_format="{n}/{total}")
    clock = iter([0.0, 5.0, 12.0, 13.0, 30.0])
    assert buf.getvalue() == "0/4\n"  # the start
    buf.seek(0), buf.truncate()
    bar._line_clock, bar._line_interval, bar._line_last = lambda: next(clock), 10.0, None
    for _ in range(4):
        bar.update(1)
        bar.refresh()  # a redraw per update: the interval decides what is written
    bar.close()
    bar.close()  # a second close writes nothing
    # t=0 written, 5 too soon, 12 written, 13 too soon; the final count at close
    assert buf.getvalue() == "1/4\n3/4\n4/4\n"


def test_the_final_line_is_not_repeated_when_it_was_the_last_written():
    buf = io.StringIO()
    bar = progress_bar(total=2, desc="y", file=buf, interval_s=0.0)
    bar.update(2)  # interval 0: written at once
    bar.close()
    assert [line.split(" [")[0] for line in buf.getvalue().splitlines()] == [
        "y: 0/2 (0%)",
        "y: 2/2 (100%)",
    ]


def test_on_a_terminal_the_bar_is_redrawn_in_place():
    buf = Terminal()
    assert is_terminal(buf) and not is_terminal(io.StringIO()) and not is_terminal(object())
    for _ in progress_bar(range(3), desc="tty", file=buf):
        pass
    frames = buf.getvalue().split("\r")
    assert frames[0] == "" and frames[1].startswith("tty:   0%|")
    assert "3/3" in frames[-1] and frames[-1].endswith("\n")


def test_disabled_writes_nothing():
    buf = io.StringIO()
    for _ in progress_bar(range(3), file=buf, disable=True):
        pass
    assert buf.getvalue() == ""


def test_line_frames_keep_a_bars_first_and_last_frame_as_lines():
    buf = io.StringIO()
    out = LineFrames(buf)
    out.write("before\n")
    for _ in tqdm(range(3), desc="Loading weights", file=out, mininterval=0):
        pass
    for _ in tqdm(range(3), desc="gone", file=out, leave=False, mininterval=0):
        pass  # a bar that clears itself when it ends: its first frame only
    out.write("after\n")
    out.finish()
    text = buf.getvalue()
    assert "\r" not in text
    lines = text.splitlines()
    assert lines[0] == "before" and lines[-1] == "after" and len(lines) == 5
    assert re.match(r"Loading weights:\s+0%.* 0/3 ", lines[1])
    assert re.match(r"Loading weights: 100%.* 3/3 ", lines[2])
    assert re.match(r"gone:\s+0%.* 0/3 ", lines[3])
    assert not out.isatty() and out.closed is False  # anything else is the file's


def test_line_frames_write_a_replaced_frame_once_an_interval():
    buf = io.StringIO()
    times = iter(float(t) for t in range(100))
    out = LineFrames(buf, interval_s=10.0, clock=lambda: next(times))
    for k in range(25):  # the frame of step k replaced at t = k
        out.write(f"\rstep {k}")
    out.write("\n")
    # steps 0, 10 and 20 written as they are replaced (t = 1, 11, 21), the last when it ends
    assert buf.getvalue() == "step 0\nstep 10\nstep 20\nstep 24\n"


def test_line_frames_end_a_partial_line_and_write_a_held_frame_on_finish():
    buf = io.StringIO()
    out = LineFrames(buf)
    out.write("partial")
    out.write("\rframe 1")
    assert buf.getvalue() == "partial\n"  # the frame is held until it ends or is replaced
    out.finish()
    assert buf.getvalue() == "partial\nframe 1\n"
    out.write("a\r\nb\n")  # a Windows newline is a newline, not a frame
    assert buf.getvalue() == "partial\nframe 1\na\nb\n"
