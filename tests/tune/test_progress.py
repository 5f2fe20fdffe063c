import io

from kiln.tune.progress import ProgressPrinter, bar, duration
from kiln.tune.tuner import TuneStatus
from tests.tune.test_allocate import _state


def test_plain_progress_prints_one_line_per_update():
    states = [_state("conv 1x8", 1, [2e-3, 1e-3]), _state("relu 1x8", 2, [])]
    out = io.StringIO()
    ProgressPrinter(out, interactive=False)(TuneStatus(states, 0, 2, 10, 4.0))
    line = out.getvalue()
    assert line.count("\n") == 1
    assert "[1/2] conv 1x8" in line and "2 trials" in line and "best 1 ms (default 2 ms, 2.00x)" in line
    assert "2/10 trials" in line and "ETA 16s" in line and "model est. 1 ms (untuned 2 ms)" in line


def test_a_terminal_gets_two_lines_redrawn_and_a_line_left_per_task():
    states = [_state("conv", 1, [1e-3]), _state("relu", 1, [1e-6])]
    out = io.StringIO()
    show = ProgressPrinter(out, interactive=True)
    show(TuneStatus(states, 0, 1, 4, 1.0))
    show(TuneStatus(states, 1, 2, 4, 2.0))
    text = out.getvalue()
    assert text.count("\x1b[F\x1b[2K") == 2  # the two status lines, cleared once
    assert text.split("\x1b[F\x1b[2K")[-1].startswith("[1/2] conv")  # task 1's line stays behind


def test_bar_and_duration():
    assert bar(5, 10, 10) == "[#####-----]" and bar(3, 0, 4) == "[####]"
    assert duration(59.4) == "59s" and duration(125) == "2m05s"
