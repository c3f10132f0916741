"""Where a study lives: a local DIR, or a bucket prefix (`s3://`, `gs://`) whose trials are
ordinary bucket runs. For a bucket, tune keeps its own files (trial logs, work dirs, the
summary before upload) in a local home, the default work dir of the prefix; each trial's
run goes to `DIR/trials/NNNN` in the bucket through train's own local copy under its work
dir (`storage.run_copy`), which tune reads as it grows: train writes it first, the bucket
only every few seconds. tune.json, trials.csv, tune.png and the logs are uploaded as they
change."""

from __future__ import annotations

import os

from tfyard.flags import OUTPUT_FLAG
from tfyard.runfiles.files import LocalFiles, files_for
from tfyard.runfiles.layout import StudyDirectory
from tfyard.storage import copy_url, default_work, in_bucket, run_copy


class StudyPlace:
    """The study `output_dir`: its runs' directories (`runs`: a path or bucket URLs) and its
    local files (`home`)."""

    def __init__(self, output_dir: str):
        self.url = output_dir.rstrip("/") if in_bucket(output_dir, OUTPUT_FLAG) else None
        self.runs = StudyDirectory(self.url or os.path.abspath(output_dir))
        self.home = StudyDirectory(default_work(self.url) if self.url else self.runs.root)

    @property
    def name(self) -> str:
        """The study's default name: the last part of DIR, a path or a bucket URL alike."""
        return os.path.basename(self.runs.root)

    def run_dir(self, number: int) -> str:
        """Trial `number`'s run directory, its --output_dir: `DIR/trials/NNNN`."""
        return self.runs.trial(number)

    def work_dir(self, number: int) -> str:
        """Trial `number`'s --work_dir, on this machine."""
        return self.home.trial_work(number)

    def local_run(self, run_dir: str, work_dir: str) -> str:
        """Where the run `run_dir` is written on this machine: itself, or in a bucket its
        local copy under `work_dir`."""
        return run_copy(run_dir, work_dir) if self.url else run_dir

    def holds(self, run_dir: str | None) -> bool:
        """Whether `run_dir` is one of this study's trials (a shared storage's other
        studies keep theirs)."""
        trials = self.runs.trials + "/"
        if not run_dir:
            return False
        return run_dir.startswith(trials) if self.url else \
            os.path.abspath(run_dir).startswith(self.runs.trials + os.sep)

    def publish(self, *paths: str) -> None:
        """The local files `paths` of `home` uploaded to the same names in the bucket;
        nothing for a local study (they are written in place)."""
        if self.url:
            local, bucket = LocalFiles(), files_for(self.url)
            for path in filter(local.has, paths):
                bucket.write_whole(copy_url(path, self.home.root, self.url),
                                   local.read_from(path, 0))
