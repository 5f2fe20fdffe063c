"""A process's memory as Linux counts it: resident bytes now and at peak, and the pages of one mapped file.

The footprint report and benchmark read these. /proc is Linux's; elsewhere the readers return None
(peak_resident_bytes falls back on getrusage, which every Unix has).
"""

from __future__ import annotations

import ctypes
import os
import resource
from dataclasses import dataclass


def resident_bytes(pid: int | str = "self") -> int | None:
    """The process's resident set now (VmRSS), or None without /proc."""
    return _status_bytes(pid, "VmRSS")


def peak_resident_bytes() -> int:
    """This process's largest resident set so far (VmHWM; getrusage's ru_maxrss where /proc is absent)."""
    peak = _status_bytes("self", "VmHWM")
    return peak if peak is not None else resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def return_freed_memory() -> None:
    """Hand the C heap's free pages back to the system (glibc's malloc_trim). Arrays freed after a build (a
    tiered session's imported weights) stay in the heap otherwise, resident (resnet50: 70 MB). A no-op
    where the C library has no malloc_trim."""
    trim = getattr(ctypes.CDLL(None), "malloc_trim", None)
    if trim is not None:
        trim(0)


def _status_bytes(pid: int | str, key: str) -> int | None:
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith(key + ":"):
                    return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


@dataclass(frozen=True)
class FilePages:
    """Bytes of one file's mappings in a process: resident, proportional (PSS), shared and private."""

    rss: int = 0
    pss: int = 0
    shared: int = 0  # resident pages another process maps too
    private: int = 0  # resident pages only this process maps (what it adds)


_FIELDS = {"Rss": "rss", "Pss": "pss", "Shared_Clean": "shared", "Shared_Dirty": "shared",
           "Private_Clean": "private", "Private_Dirty": "private"}


def file_pages(path: str | os.PathLike, pid: int | str = "self") -> FilePages | None:
    """The resident pages of `path`'s mappings in process `pid`, from /proc/PID/smaps; None without it."""
    target = os.path.realpath(path)
    totals = dict.fromkeys(("rss", "pss", "shared", "private"), 0)
    inside = False
    try:
        with open(f"/proc/{pid}/smaps") as f:
            for line in f:
                head = line.split(None, 1)[0]
                if not head.endswith(":"):  # a mapping's header: "start-end perms offset dev inode path"
                    parts = line.split(None, 5)
                    inside = len(parts) == 6 and parts[5].strip() == target
                elif inside and head[:-1] in _FIELDS:
                    totals[_FIELDS[head[:-1]]] += int(line.split()[1]) * 1024
    except OSError:
        return None
    return FilePages(**totals)
