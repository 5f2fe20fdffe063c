"""What `kiln tune` shows while it works: the current task's and the whole session's progress.

On a terminal two status lines are redrawn in place (the task: its trials, how much of its space is
measured, best so far against its default; overall: trials, elapsed, ETA, estimated model latency
tuned against untuned), and a line stays behind for each task left. Elsewhere (a log file, CI) each
update is one plain line.
"""

from __future__ import annotations

import sys
from typing import TextIO

from kiln.tune.state import TaskState, estimate
from kiln.tune.tuner import TuneStatus

BAR = 20


def bar(done: int, total: int, width: int = BAR) -> str:
    filled = min(width * done // total, width) if total else width
    return "[" + "#" * filled + "-" * (width - filled) + "]"


def duration(seconds: float) -> str:
    seconds = int(round(seconds))
    return f"{seconds // 60}m{seconds % 60:02d}s" if seconds >= 60 else f"{seconds}s"


def ms(seconds: float | None) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.4g} ms"


def task_line(st: TaskState, index: int, count: int) -> str:
    best = st.best
    default = st.default_seconds
    gain = f", {default / best[1]:.2f}x" if best and default else ""
    fails = f", {st.failures} failed" if st.failures else ""
    size = st.task.space.size()
    return (f"[{index + 1}/{count}] {st.task.name[:32]:32s} {st.trials:4d} trials {bar(len(st.measured), size, 10)} "
            f"{len(st.measured)}/{size} of space  best {ms(best[1] if best else None)} "
            f"(default {ms(default)}{gain}{fails})")


def overall_line(status: TuneStatus) -> str:
    done, total = status.trials, status.total
    eta = status.elapsed / done * (total - done) if done else 0.0
    return (f"overall {bar(done, total)} {done}/{total} trials, {duration(status.elapsed)} elapsed, "
            f"ETA {duration(eta)}; model est. {ms(estimate(status.states, True))} "
            f"(untuned {ms(estimate(status.states, False))})")


class ProgressPrinter:
    """A tuner progress callback that draws on `stream`."""

    def __init__(self, stream: TextIO | None = None, interactive: bool | None = None):
        self.stream = stream or sys.stdout
        self.interactive = self.stream.isatty() if interactive is None else interactive
        self.current = -1
        self.drawn = 0

    def __call__(self, status: TuneStatus) -> None:
        states, index = status.states, status.current
        lines = [task_line(states[index], index, len(states)), overall_line(status)]
        if not self.interactive:
            self.stream.write(f"{lines[0]} | {lines[1]}\n")
            self.stream.flush()
            return
        if self.drawn:
            self.stream.write("\x1b[F\x1b[2K" * self.drawn)
        if self.current not in (-1, index):
            self.stream.write(task_line(states[self.current], self.current, len(states)) + "\n")
        self.current = index
        self.stream.write("\n".join(lines) + "\n")
        self.drawn = len(lines)
        self.stream.flush()
