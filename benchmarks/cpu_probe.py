"""`python cpu_probe.py OUT.json -m MODULE ARGS...`: runs MODULE as `python -m` would and, as
it exits, writes where its CPU went to OUT.json, figures that do not depend on the machine's
load (a shared machine changes wall times, not CPU seconds or bytes):

- `threads`: CPU seconds of each Python thread by name (read as it ends, or at exit from
  /proc), `main` the main thread's, `process` the whole process's (TensorFlow's own threads
  are the rest);
- `store`: each object-store call the run made (`S3Store`'s upload, put, delete, read, head,
  listing), counted, with the bytes uploaded, by file name and the thread's CPU inside them
  (`uploads`: each file of the run sent, by an upload or a put; the lease's renewals apart).
"""

from __future__ import annotations

import atexit
import collections
import json
import os
import resource
import runpy
import sys
import threading
import time

TICK = os.sysconf("SC_CLK_TCK")


def _task_seconds(native_id: int) -> float | None:
    """utime + stime of this process's thread `native_id`."""
    try:
        with open(f"/proc/self/task/{native_id}/stat") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) / TICK


threads: dict[str, float] = collections.defaultdict(float)
calls: dict[str, dict] = collections.defaultdict(lambda: {"calls": 0, "bytes": 0, "cpu_s": 0.0})
uploads: dict[str, dict] = collections.defaultdict(lambda: {"calls": 0, "bytes": 0})


def _timed_threads() -> None:
    run = threading.Thread.run

    def timed(self):
        try:
            run(self)
        finally:
            threads[self.name] += time.thread_time()

    threading.Thread.run = timed


def _uploaded(place, size: int) -> None:
    where = uploads[os.path.basename(str(place.key))]
    where["calls"] += 1
    where["bytes"] += size


def _counted_store() -> None:
    from tfyard.runfiles.layout import LEASE
    from tfyard.storage.s3 import S3Store

    def counted(name, method):
        def call(self, *args, **kwargs):
            started = time.thread_time()
            try:
                result = method(self, *args, **kwargs)
                if name == "listing":
                    result = list(result)
                return result
            finally:
                figure = calls[name]
                figure["calls"] += 1
                figure["cpu_s"] += time.thread_time() - started
                if name == "upload":
                    size = os.path.getsize(args[0]) if os.path.exists(args[0]) else 0
                    figure["bytes"] += size
                    _uploaded(args[1], size)
                elif name == "put" and not args[0].key.endswith(LEASE):   # the run's files
                    _uploaded(args[0], len(args[1]))
        return call

    for name in ("upload", "put", "delete", "read", "head", "listing", "download"):
        setattr(S3Store, name, counted(name, getattr(S3Store, name)))


def _write(out: str) -> None:
    for thread in threading.enumerate():
        if thread is not threading.main_thread() and thread.native_id:
            threads[thread.name] += _task_seconds(thread.native_id) or 0.0
    usage = resource.getrusage(resource.RUSAGE_SELF)
    figures = {"threads": {**threads, "main": time.thread_time()},
               "process": usage.ru_utime + usage.ru_stime,
               "store": calls, "uploads": uploads}
    with open(out, "w") as handle:
        json.dump(figures, handle, indent=1)


def main() -> None:
    out, flag, module, *args = sys.argv[1:]
    assert flag == "-m", "usage: cpu_probe.py OUT.json -m MODULE ARGS..."
    _timed_threads()
    _counted_store()
    atexit.register(_write, out)
    sys.argv = [module, *args]
    runpy.run_module(module, run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
