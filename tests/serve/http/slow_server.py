"""`python -m tests.serve.http.slow_server REPO DELAY_S`: `kiln serve`'s serve() on a free port over the
ThreadDispatcher double, each run delayed, printing "queued" per request it takes: the SIGTERM test's
server, whose requests stay in flight long enough to be signalled."""

from __future__ import annotations

import sys
import time

from kiln.serve.server import serve
from tests.serve.http.thread_dispatcher import ThreadDispatcher


class SlowDispatcher(ThreadDispatcher):
    def __init__(self, delay_s: float) -> None:
        super().__init__()
        self.delay_s = delay_s

    def submit(self, request):
        future = super().submit(request)
        print("queued", flush=True)
        return future

    def _run(self, request, model, timeout_s):
        time.sleep(self.delay_s)
        return super()._run(request, model, timeout_s)


if __name__ == "__main__":
    sys.exit(serve(sys.argv[1], port=0, dispatcher=SlowDispatcher(float(sys.argv[2]))))
