"""`tfyard tune --on ray`: each trial a `tfyard launch ray` of its train command, so a trial
is one Ray actor (or `--workers N` of them in one placement group: a gang) and everything
`launch ray` keeps (members' TF_CONFIG, SIGTERM saving, a lost actor named) holds for
trials too. The search loop stays on this machine: it alone opens the study's storage, and
reads each trial's reports from its run directory, which the Ray workers write (a local
DIR for a Ray on this machine; a shared file system across machines; or a bucket prefix,
read from the bucket: `tune.trial`).
A trial's launcher runs in the trial's process group, so pruning (SIGTERM) and a kill reach
its actors as they reach a local trial's process; a PBT trial's members stopping at their
--pause_at_step end its launcher with the same exit code as a local trial's process."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from dataclasses import dataclass, replace

from tfyard.errors import UserError

PLACES = ("local", "ray")   # --on's choices
LAUNCH = (sys.executable, "-m", "tfyard", "launch", "ray")


@dataclass(frozen=True)
class RayTrials:
    """Where and how large each trial runs on Ray: `workers` members of `cpus` CPUs and
    `gpus` GPUs each, on the cluster at `address` (None: RAY_ADDRESS, a Ray started on this
    machine, else a local one for the study)."""

    address: str | None = None
    workers: int = 1
    cpus: float = 1.0
    gpus: float = 0.0

    def command(self, train: list[str]) -> list[str]:
        """The trial's `train` command as a `launch ray` of `workers` members."""
        return [*LAUNCH, "--address", self.address, "--workers", str(self.workers),
                "--cpus_per_member", f"{self.cpus:g}", "--gpus_per_member", f"{self.gpus:g}",
                "--", *train]

    @property
    def threads(self) -> int:
        """A member's TensorFlow op threads: the CPUs it reserved."""
        return max(1, int(self.cpus))

    @contextmanager
    def session(self, parallel: int):
        """Connect to the cluster (or start a local one) for the study's length; yields these
        settings with the cluster's address, for the trials' launchers to join. Refuses,
        in one line, `parallel` trials the cluster cannot hold at once."""
        from tfyard.launch.ray import Placement, ray_session

        placement = Placement(self.cpus, self.gpus)
        with ray_session(self.address) as ray:
            have = ray.cluster_resources()
            for kind, each in placement.bundle.items():
                need = parallel * self.workers * each
                if need > have.get(kind, 0):
                    raise UserError(
                        f"--parallel {parallel} x --workers {self.workers} x {each:g} {kind} "
                        f"= {need:g} {kind}, more than the Ray cluster's {have.get(kind, 0):g}; "
                        "lower --parallel, --workers or --cpus_per_member/--gpus_per_member")
            address = ray.get_runtime_context().gcs_address
            print(f"tune: on Ray at {address}: {parallel} trial(s) at a time, each "
                  f"{self.workers} worker(s) of {placement.bundle} (cluster: "
                  f"{have.get('CPU', 0):g} CPUs, {have.get('GPU', 0):g} GPUs)", flush=True)
            yield replace(self, address=address)


def check(on: str, address: str | None, workers: int, cpus: float,
          gpus: float) -> RayTrials | None:
    """The checked `--on` settings (`on` and `workers` already of their kinds): RayTrials
    for `--on ray`, None on this machine."""
    if on == "local":
        given = [flag for flag, value, default in (
            ("address", address, None), ("workers", workers, 1),
            ("cpus_per_member", cpus, 1.0), ("gpus_per_member", gpus, 0.0))
            if value != default]
        if given:
            raise UserError(f"--{given[0]} is for --on ray; add --on ray or drop it")
        return None
    from tfyard.launch.ray import Placement

    Placement(cpus, gpus)   # its refusals of the two numbers, before Ray starts
    return RayTrials(address, workers, float(cpus), float(gpus))
