"""Processes forked from one warm server instead of started cold.

The server (`serve`, in a process of its own) has imported what its commands need once:
for `tfyard train`, Python's modules, TensorFlow and tfyard's training code, ~2 s of CPU.
Each process it forks starts with them loaded: a trial of tune's reaches its first step
~0.7 s after it is asked for instead of ~2.5 s, and a study pays the import once, not once
a trial. The server only forks: it never starts TensorFlow's runtime, so each child starts
the runtime of its own, with the environment the server was given.

A child runs in a session of its own, its output on a pipe of ours (passed to the server
over the socket), and the server relays its exit status. `ForkServer.process` answers with
a handle that behaves as `launch.local.spawn`'s `subprocess.Popen` does (pid, stdout, poll,
wait, returncode, and a guard that kills its group when we go), so whoever runs it cannot
tell the two apart. The server is a shortcut, never a dependency: one that does not start,
does not answer or dies is replaced by plain processes; the children it leaves are killed
and end with SIGKILL's status (their exit status died with it).

The channel is a SOCK_SEQPACKET socket pair (messages keep their bounds; the server reads
its end as stdin), one JSON message each way:
    us -> server   {"argv": [...], "env": {...}} with our pipe's write end attached (env:
                   what the child sets in its environment before it runs, such as the GPUs
                   a trial may see: the server never started TensorFlow's runtime, so the
                   child's runtime reads them)
    server -> us   {"pid": N} once forked; {"exit": N, "code": C} once reaped (C as
                   Popen's returncode: negative for a signal)
"""

from __future__ import annotations

import collections
import json
import os
import queue
import select
import signal
import socket
import subprocess
import sys
import threading
from collections.abc import Callable, Sequence

from tfyard.launch.local import guard, signal_group, spawn

# Linux only: elsewhere (macOS's system libraries are not fork-safe) plain processes.
FORKS = sys.platform.startswith("linux")
ANSWER_S = 300.0   # the most a request waits for the server's pid: its import, on a slow disk
MESSAGE_BYTES = 1 << 20


class Forked:
    """A process the server forked, seen as a `subprocess.Popen` of `spawn` is."""

    def __init__(self, pid: int, stdout, args: Sequence[str]):
        self.pid, self.stdout, self.args = pid, stdout, list(args)
        self.returncode: int | None = None
        self.guard: subprocess.Popen | None = None
        self._ended = threading.Event()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._ended.wait(timeout):
            raise subprocess.TimeoutExpired(self.args, timeout)
        return self.returncode

    def ended(self, code: int) -> None:
        self.returncode = code
        self._ended.set()


class ForkServer:
    """Starts the commands that begin with `serves` as forks of the server `command` (run
    with `env`, started at the first such command), and any other as `spawn` does."""

    def __init__(self, command: Sequence[str], serves: Sequence[str], env: dict[str, str]):
        self.command, self.serves, self.env = list(command), tuple(serves), env
        self._channel: socket.socket | None = None
        self._server: subprocess.Popen | None = None
        self._lost = False   # the server would not start or died: spawn from now on
        self._asked: collections.deque = collections.deque()   # (args, read end) in order
        self._forked: queue.Queue = queue.Queue()   # a Forked per answer, None when lost
        self._running: dict[int, Forked] = {}
        self._lock = threading.Lock()

    def prepare(self, command: Sequence[str]) -> None:
        """Start the server now when it serves `command`: its import then overlaps whatever
        comes before the first fork."""
        if self._served(command) and self._channel is None:
            self._start()

    def process(self, command: Sequence[str], env: dict[str, str] | None = None):
        """`command` started, forked from the server where it can be, else spawned; `env`
        is added to the server's environment for this process alone."""
        if self._served(command):
            forked = self._fork(command, env or {})
            if forked is not None:
                forked.guard = guard(forked.pid)
                return forked
        return spawn(command, {**self.env, **(env or {})})

    def close(self) -> None:
        """End the server (it kills any child still running, at our end's close)."""
        if self._channel is not None:
            self._channel.shutdown(socket.SHUT_RDWR)   # wakes our reader, and the server
            self._channel.close()
            self._server.wait()
            self._channel = None

    def _served(self, command: Sequence[str]) -> bool:
        return FORKS and tuple(command[:len(self.serves)]) == self.serves and not self._lost

    def _fork(self, command: Sequence[str], env: dict[str, str]) -> Forked | None:
        if self._channel is None:
            self._start()
        read, write = os.pipe()
        with self._lock:
            if self._lost:
                os.close(read)
                os.close(write)
                return None
            self._asked.append((command, read))
        try:
            argv = list(command[len(self.serves):])
            socket.send_fds(self._channel, [json.dumps({"argv": argv, "env": env}).encode()],
                            [write])
        except OSError:   # the server is gone: the reader tells it (None)
            pass
        finally:
            os.close(write)
        try:
            return self._forked.get(timeout=ANSWER_S)
        except queue.Empty:   # a server that does not answer: replaced by plain processes
            signal_group(self._server, signal.SIGKILL)
            return self._forked.get()

    def _start(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self._server = subprocess.Popen(
                self.command, env=self.env, stdin=theirs, stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL, start_new_session=True)
        except OSError:   # no such program: plain processes say why, one by one
            ours.close()
            self._lost = True
            return
        finally:
            theirs.close()
        self._channel = ours
        threading.Thread(target=self._read, args=(ours,), daemon=True).start()

    def _read(self, channel: socket.socket) -> None:
        """The server's answers, until it is gone or answers what it should not; then it is
        ended with what it left, whatever happened here: no caller waits on it forever."""
        try:
            while self._answered(channel):
                pass
        finally:
            self._lose()

    def _answered(self, channel: socket.socket) -> bool:
        """One answer taken; False once the server is gone, or it said what it should not
        (then it is killed: its answers can no longer be matched to our requests)."""
        try:
            message = channel.recv(MESSAGE_BYTES)
        except OSError:
            return False
        if not message:
            return False
        with self._lock:
            try:
                answer = json.loads(message)
                expected = "pid" in answer and self._asked or "exit" in answer
            except (ValueError, TypeError):
                expected = False
            if not expected:
                signal_group(self._server, signal.SIGKILL)
                return False
            if "pid" in answer:
                args, read = self._asked.popleft()
                forked = Forked(answer["pid"], os.fdopen(read, "rb"), args)
                self._running[forked.pid] = forked
                self._forked.put(forked)
            elif answer["exit"] in self._running:
                self._running.pop(answer["exit"]).ended(answer["code"])
        return True

    def _lose(self) -> None:
        """The server is gone: plain processes from now on, its children ended with
        SIGKILL's status, every request still waiting answered None."""
        with self._lock:
            self._lost = True
            for _, read in self._asked:
                os.close(read)
                self._forked.put(None)
            self._asked.clear()
            for forked in self._running.values():
                signal_group(forked, signal.SIGKILL)
                forked.ended(-signal.SIGKILL)
            self._running.clear()


def serve(run: Callable[[list[str]], None]) -> None:
    """The server's loop, on the channel that is its stdin: fork `run(argv)` for each
    request, relay each child's exit, and at the channel's close kill the children still
    running and return. `run` ends its process (with SystemExit, as `cli.run` does)."""
    channel = socket.socket(fileno=sys.stdin.fileno())
    wake, woken = os.pipe()
    os.set_blocking(woken, False)
    stops: list[int] = []   # SIGTERM/SIGINT to the server: its children save and end first
    signal.signal(signal.SIGCHLD, lambda *_: None)   # a child's end wakes the select
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda signum, _: stops.append(signum))
    signal.set_wakeup_fd(woken, warn_on_full_buffer=False)
    children: set[int] = set()
    told = False   # the children were sent SIGTERM
    while True:
        readable, _, _ = select.select([channel, wake], [], [])
        if wake in readable:
            os.read(wake, 4096)
            _reap(channel, children)
        if stops:   # each child saves and ends; the server, once the last has
            if not told:
                _signal_all(children, signal.SIGTERM)
                told = True
            if not children:
                return
            continue
        if channel not in readable:
            continue
        try:
            message, fds, _, _ = socket.recv_fds(channel, MESSAGE_BYTES, 1)
        except OSError:   # our caller's end is gone, as at its close
            message = b""
        if not message:
            break
        ready, led = os.pipe()
        pid = os.fork()
        if pid == 0:   # never back into this loop: `run` ends the child, whatever it raises
            os.close(ready)
            _child(run, json.loads(message), fds[0], channel, (wake, woken, led))
        os.close(led)
        os.read(ready, 1)   # the child leads its own session (or is gone): its group exists
        os.close(ready)
        os.close(fds[0])
        children.add(pid)
        _answer(channel, {"pid": pid})
    _signal_all(children, signal.SIGKILL)
    for pid in children:
        os.waitpid(pid, 0)   # reaped here: no zombie left to the init process


def _signal_all(children: set[int], sig: int) -> None:
    """`sig` to each child's process group."""
    for pid in children:
        try:
            os.killpg(pid, sig)
        except OSError:
            pass


def _reap(channel: socket.socket, children: set[int]) -> None:
    for pid in list(children):
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            children.discard(pid)
            _answer(channel, {"exit": pid, "code": os.waitstatus_to_exitcode(status)})


def _answer(channel: socket.socket, message: dict) -> None:
    try:
        channel.send(json.dumps(message).encode())
    except OSError:   # our caller's end is gone: the next read says so
        pass


def _child(run: Callable[[list[str]], None], request: dict, output: int,
           channel: socket.socket, wakes: Sequence[int]) -> None:
    """In the fork: a session of its own, the server's signal handling undone and its files
    closed, stdin empty, stdout and stderr on `output`, the request's environment, fresh
    random state (Python's own reseeds at fork; numpy's global does not); then `run` of the
    request's argv, whose SystemExit goes up to the interpreter's exit as in any process."""
    try:
        os.setsid()
        os.environ.update(request.get("env", {}))
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.default_int_handler)
        channel.close()
        for fd in wakes:   # the last: the server's wait for the session, which ends here
            os.close(fd)
        os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
        os.dup2(output, 1)
        os.dup2(output, 2)
        os.close(output)
        if "numpy" in sys.modules:
            sys.modules["numpy"].random.seed()
    except BaseException:
        os._exit(1)
    run(request["argv"])
    os._exit(1)   # `run` returned: it should have ended the process
