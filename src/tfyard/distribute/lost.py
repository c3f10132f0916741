"""A cluster member lost mid-training, said in one line instead of TensorFlow's traceback.

When a peer dies, TensorFlow fails the survivor's next collective or remote read with an
op error (`UnavailableError ... Collective ops is aborted by: recvmsg:Connection reset by
peer`) of some 60 lines. Training cannot go on without it: an all-reduce needs every
member, and a parameter server's variables die with it. So the survivor names the lost
member, its address and the step reached, and exits LOST_PEER_EXIT_CODE, which launchers
and the Kubernetes Job treat as retryable (see `tfyard.errors`). TensorFlow is imported
only when an error is judged.
"""

from __future__ import annotations

import contextlib
import logging
import re
import sys
from collections.abc import Callable, Iterator

from tfyard.distribute.cluster import ClusterConfig
from tfyard.errors import LOST_PEER_EXIT_CODE

# TensorFlow names the remote end of a failed call as /job:NAME/replica:0/task:INDEX.
_REMOTE = re.compile(r"/job:(chief|worker|ps|evaluator)/replica:\d+/task:(\d+)")
# The collective executor's abort and the coordination service's verdict on a peer.
_PEER_WORDS = ("collective ops is aborted", "tasks are unhealthy", "have crashed")
# gRPC's words for a call to another task that failed (with that task named in the text,
# so a bucket or other service failing with the same words is not taken for a peer).
_CALL_WORDS = ("connection reset", "connection refused", "failed to connect", "socket closed",
               "unavailable")


def lost_members(text: str, cluster: ClusterConfig) -> list[str]:
    """`worker:1 (host:port)` for each other member the error text names, in order."""
    me = (cluster.task_type, cluster.task_index)
    found = []
    for job, index in _REMOTE.findall(text):
        if (job, int(index)) == me:
            continue
        addresses = cluster.jobs.get(job, ())
        address = f" ({addresses[int(index)]})" if int(index) < len(addresses) else ""
        if f"{job}:{index}{address}" not in found:
            found.append(f"{job}:{index}{address}")
    return found


def is_peer_loss(exc: BaseException) -> bool:
    """Whether a TensorFlow op error says a peer went away (not a bug of this process)."""
    import tensorflow as tf

    if isinstance(exc, tf.errors.UnavailableError):
        return True
    if not isinstance(exc, tf.errors.OpError):
        return False
    text = (getattr(exc, "message", None) or str(exc)).lower()
    return any(words in text for words in _PEER_WORDS) or (
        bool(_REMOTE.search(text)) and any(words in text for words in _CALL_WORDS))


def message(exc: BaseException, cluster: ClusterConfig, strategy: str, step: int) -> str:
    """The one line: who was lost, where, at which step, and what happens next."""
    text = getattr(exc, "message", None) or str(exc)
    named = lost_members(text, cluster)
    if strategy == "parameter_server":
        ps = [name for name in named if name.startswith("ps:")]
        lost = ", ".join(ps or named) or "a parameter server"
        during = "(its variables are gone)" if ps or not named else "(the coordinator gave up)"
    else:
        lost = ", ".join(named) or "an all-reduce peer"
        during = "during all-reduce"
    return lost_line(lost, f"({type(exc).__name__}) {during} after step {step}")


def lost_line(lost: str, how: str) -> str:
    """`tfyard: error: lost MEMBER HOW; ...`: what every member that lost a peer says."""
    return (f"tfyard: error: lost {lost} {how}; the job must restart from the latest "
            f"checkpoint (exit {LOST_PEER_EXIT_CODE}: launch --max_restarts and the "
            "Kubernetes Job do)")


# TensorFlow's ClusterCoordinator logs each closure a peer's failure broke, at ERROR with
# the op error's whole text (~20 lines each, several at once): "Remote function on worker
# W failed with E", "W encountered the following error when processing closure: E", "Start
# cancelling closures due to error E".
_WORKER = re.compile(r"/job:(\w+)/(?:replica:\d+/)?task:(\d+)")
_ERROR = re.compile(r"\b(\w+Error)\(")


class CoordinatorLines(logging.Filter):
    """One line per worker and error for the coordinator's own error records, in place of
    them: it retries those closures itself, and a lost ps ends in `peer_loss`'s line."""

    def __init__(self):
        super().__init__()
        self.said: set[tuple[str, ...]] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if "coordinator" not in record.pathname or record.levelno < logging.ERROR:
            return True
        first = record.getMessage().split("\n", 1)[0]
        worker, error = _WORKER.search(first), _ERROR.search(first)
        if worker and (worker.groups(), error and error.group(1)) not in self.said:
            self.said.add((worker.groups(), error and error.group(1)))
            print(f"tfyard: warning: a step failed on {':'.join(worker.groups())} "
                  f"({error.group(1) if error else 'an error'}); the coordinator runs it "
                  "again", file=sys.stderr, flush=True)
        return False


@contextlib.contextmanager
def peer_loss(cluster: ClusterConfig, strategy: str, step: Callable[[], int]) -> Iterator[None]:
    """Turn a lost peer inside the block into one line on stderr and exit
    LOST_PEER_EXIT_CODE; a no-op outside a cluster. `step` gives the last step completed.
    Under a parameter-server strategy the coordinator's closure failures are one line each."""
    if cluster.role == "single":
        yield
        return
    tensorflow_log = logging.getLogger("tensorflow")
    lines = CoordinatorLines() if strategy == "parameter_server" else None
    if lines:
        tensorflow_log.addFilter(lines)
    try:
        yield
    except Exception as exc:
        if not is_peer_loss(exc):
            raise
        print(message(exc, cluster, strategy, step()), file=sys.stderr, flush=True)
        raise SystemExit(LOST_PEER_EXIT_CODE) from None
    finally:
        if lines:
            tensorflow_log.removeFilter(lines)
