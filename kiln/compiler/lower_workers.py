"""Lowering fused groups in worker processes, so that a cold build uses every core (te/tir lowering is
pure Python: threads would share one core under the GIL).

A worker is a child Python running `serve` (started as a command, never by multiprocessing: a spawned
child re-imports the user's `__main__`) that lowers the groups it is sent into the kernel cache and
answers when each is stored. The kernel cache is the only channel back: the building process then
finds the group there, with the C text a lowering of its own would have rendered (the cache's records
are built for reuse across processes). Whatever a worker cannot do (a group whose record is not
cacheable, a crash, a group that fails to lower) the building process simply lowers itself, with its
usual errors, so workers change how long a build takes and nothing else.

Work is shared by stealing: the building process takes groups from the front of the list, in order,
the workers from the back; a group a worker holds is waited for when the building process reaches it.
"""

from __future__ import annotations

import copyreg
import io
import os
import pickle
import struct
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any

from kiln.errors import KilnError
from kiln.ir.expr import Function
from kiln.op.registry import OpDef, get_op
from kiln.target import Target

# the fewest groups to lower that pay for starting a worker (an import of the compiler, ~1-2 s on a quiet core)
MIN_GROUPS = 8
ENV_WORKERS = "KILN_LOWER_WORKERS"  # a number of worker processes; 0 lowers in the building process only
_HEADER = struct.Struct("<Q")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]  # the folder holding the kiln package
_WORKER = "from kiln.compiler.lower_workers import serve; serve()"


def worker_count(groups: int, host: Target | None = None) -> int:
    """Workers for `groups` groups to lower: one per core beyond the first (the building process lowers
    too), none for a build too small to pay for them; KILN_LOWER_WORKERS overrides the core count."""
    env = os.environ.get(ENV_WORKERS)
    if env is not None:
        try:
            wanted = int(env)
        except ValueError:
            wanted = -1
        if wanted < 0:
            raise KilnError(f"{ENV_WORKERS} must be a non-negative number of worker processes, got {env!r}")
    else:
        wanted = (host or Target.host()).cores - 1
    return 0 if groups < MIN_GROUPS else max(0, min(wanted, groups // (MIN_GROUPS // 2)))


def _dumps(obj: Any) -> bytes:
    """Pickle, with each operator record sent by name (the worker's registry holds the same records)."""
    buf = io.BytesIO()
    pickler = pickle.Pickler(buf, protocol=pickle.HIGHEST_PROTOCOL)
    pickler.dispatch_table = {**copyreg.dispatch_table, OpDef: lambda op: (get_op, (op.name,))}
    pickler.dump(obj)
    return buf.getvalue()


def _send(stream: IO[bytes], data: bytes) -> None:
    stream.write(_HEADER.pack(len(data)) + data)
    stream.flush()


def _receive(stream: IO[bytes]) -> bytes | None:
    head = stream.read(_HEADER.size)
    if len(head) < _HEADER.size:
        return None
    return stream.read(_HEADER.unpack(head)[0])


class Prefetch:
    """Worker processes lowering `jobs` ((group index, group) pairs, in build order) into the kernel
    cache at `root`; `claim(n)` before the building process lowers group n."""

    def __init__(self, jobs: Sequence[tuple[int, Function]], root: Path, tuned: Any, target: Target,
                 workers: int):
        self._pending = deque(jobs)
        self._held: dict[int, threading.Event] = {}
        self._lock = threading.Lock()
        self._context = (str(root), tuned, target)
        # the child finds this kiln whichever way the building process did (an installed package or a path)
        path = os.pathsep.join(x for x in (str(_PACKAGE_ROOT), os.environ.get("PYTHONPATH")) if x)
        env = dict(os.environ, PYTHONPATH=path, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
        self._procs: list[subprocess.Popen] = []
        for _ in range(workers):
            try:
                self._procs.append(subprocess.Popen([sys.executable, "-c", _WORKER], stdin=subprocess.PIPE,
                                                    stdout=subprocess.PIPE, env=env, start_new_session=True))
            except OSError:  # no process to spare: the building process lowers what the others do not
                break
        self._threads = [threading.Thread(target=self._feed, args=(p,), daemon=True, name="kiln-lower-feed")
                         for p in self._procs]
        for t in self._threads:
            t.start()

    def claim(self, n: int) -> None:
        """Group n is next for the building process: taken from the list, or waited for if a worker holds it."""
        with self._lock:
            if self._pending and self._pending[0][0] == n:
                self._pending.popleft()
                return
            held = self._held.get(n)
        if held is not None:
            held.wait()

    def _next(self) -> tuple[int, Function, threading.Event] | None:
        with self._lock:
            if not self._pending:
                return None
            n, fn = self._pending.pop()
            done = self._held[n] = threading.Event()
            return n, fn, done

    def _feed(self, proc: subprocess.Popen) -> None:
        """One worker's loop: send it a group from the back of the list, wait for its answer, repeat."""
        job = self._next()
        try:
            while job is not None:
                n, fn, done = job
                try:
                    _send(proc.stdin, _dumps((*self._context, fn, f"fused_{n}")))
                    answered = _receive(proc.stdout) is not None
                finally:
                    done.set()
                if not answered:
                    return
                job = self._next()
        except (OSError, ValueError, pickle.PicklingError, TypeError, AttributeError):
            return  # the building process lowers whatever is left (ValueError: closed under us)
        finally:
            if job is not None:
                job[2].set()

    def close(self) -> None:
        """Stop the workers (a worker mid-group is killed: the building process no longer needs it)."""
        with self._lock:
            self._pending.clear()
        for p in self._procs:
            try:
                p.stdin.close()
            except OSError:
                pass
        for p, t in zip(self._procs, self._threads):
            try:
                p.wait(timeout=0.5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
            t.join()
            p.stdout.close()


@contextmanager
def prefetch(jobs: Sequence[tuple[int, Function]], root: Path, tuned: Any, target: Target,
             workers: int) -> Iterator[Prefetch | None]:
    """A Prefetch over `jobs` with `workers` processes for the `with` block (None when workers is 0)."""
    if workers <= 0:
        yield None
        return
    p = Prefetch(jobs, root, tuned, target, workers)
    try:
        yield p
    finally:
        p.close()


def serve() -> None:
    """The worker: lower each group it is sent into the kernel cache, answer after each (failures too:
    the building process lowers those itself and reports their errors)."""
    out = os.fdopen(os.dup(1), "wb")
    os.dup2(2, 1)  # a print anywhere in the compiler must not corrupt the answers
    from kiln.compiler.kernel_cache import KernelCache

    caches: dict[str, KernelCache] = {}
    while (data := _receive(sys.stdin.buffer)) is not None:
        root, tuned, target, fn, name = pickle.loads(data)
        try:
            caches.setdefault(root, KernelCache(root)).lower(fn, name, tuned, target)
        except Exception:  # noqa: BLE001 (reported by the building process when it lowers the group itself)
            pass
        _send(out, b"1")
