"""Every file a tiny run writes, and what `train`, `evaluate` and `plot` print, as a normalised JSON
snapshot: a refactor of the run directory's code must leave it unchanged.

    python ci/run_files.py SNAPSHOT.json            # write the snapshot
    python ci/run_files.py --check SNAPSHOT.json    # compare with one recorded before

`ci/run_files.baseline.json` was taken before issue 53 moved the run directory's code.

A short `tfyard train` (digits, ResNet-8, CPU, example ids recorded), `tfyard evaluate`
(checkpoint and export) and `tfyard plot`, in a temporary directory. What changes between two
identical runs is normalised: timings, pids, hosts, the temporary directory's path,
TensorFlow's binary files (named, not read), and the figures the CPU's threads round
differently (to 3 digits).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

TRAIN = ["--model", "cifar_resnet8", "--dataset", "digits", "--image_size", "16",
         "--batch_size", "32", "--learning_rate", "0.05", "--num_gpus", "0", "--seed", "3",
         "--steps_per_loop", "5", "--no_jit_compile", "--train_steps", "30",
         "--eval_every_epochs", "1", "--checkpoint_every_steps", "10", "--record_example_ids"]
# Keys whose values are when or how fast, never what.
TIMED = {"time", "started", "images_per_sec", "mean_images_per_sec", "step_time",
         "input_wait", "input_fraction", "seconds", "wall_seconds", "elapsed", "pid",
         "pid_start", "host", "token", "startup_seconds", "train_seconds"}
TIMED_PATTERN = re.compile(r"(seconds|_time|per_sec|_sec|_s)$")
TEXT = (".json", ".jsonl", ".txt", ".csv", ".pbtxt", "checkpoint")


def _tfyard(*args: str, cwd: str) -> dict:
    done = subprocess.run([sys.executable, "-m", "tfyard", *args], capture_output=True,
                          text=True, cwd=cwd, timeout=900)
    return {"args": list(args), "status": done.returncode, "stdout": done.stdout,
            "stderr": done.stderr}


def _value(key: str, value):
    if key in TIMED or TIMED_PATTERN.search(key):
        return f"<{type(value).__name__}>"
    if isinstance(value, dict):
        return {k: _value(k, v) for k, v in value.items()}
    if isinstance(value, list):
        return [_value(key, v) for v in value]
    if isinstance(value, float):
        return float(f"{value:.3g}")
    if isinstance(value, int) and value > 10**15:   # a time in nanoseconds
        return "<ns>"
    return value


def _text(text: str, root: str) -> str:
    text = text.replace(root, "<ROOT>")
    text = re.sub(r"\b\d+(\.\d+)?(s|ms| s| ms| images/sec| img/s| files/s)\b", "<T>", text)
    text = re.sub(r"\b\d+\.\d+\b", "<F>", text)   # figures: compared in the files
    text = re.sub(r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(\.\d+)?", "<DATE>", text)
    text = re.sub(r"pid \d+", "pid <PID>", text)
    text = re.sub(r"wait \d+%", "wait <P>%", text)
    return text


def _content(path: str, root: str):
    name = os.path.basename(path)
    if not name.endswith(TEXT):
        return "<binary>"   # TensorFlow's and Keras's own files (and curves.png)
    with open(path, encoding="utf-8", errors="replace") as handle:
        raw = handle.read().replace(root, "<ROOT>")
    try:
        return _value("", json.loads(raw))
    except ValueError:
        pass
    if name.endswith(".jsonl"):
        return [_value("", json.loads(line)) for line in raw.splitlines() if line.strip()]
    return _text(raw, root)


def _name(relative: str) -> str:
    """TensorBoard's event files carry a time, a host and a pid in their names."""
    return re.sub(r"events\.out\.tfevents\.[^/]+$", "events.out.tfevents.<T.HOST.PID>", relative)


def snapshot() -> dict:
    with tempfile.TemporaryDirectory(prefix="tfyard-run-files-") as root:
        root = os.path.realpath(root)
        run, work = os.path.join(root, "run"), os.path.join(root, "work")
        commands = [
            _tfyard("train", *TRAIN, "--output_dir", run, "--work_dir", work, cwd=root),
            _tfyard("evaluate", "--output_dir", run, cwd=root),
            _tfyard("evaluate", "--output_dir", run, "--export", cwd=root),
            _tfyard("plot", "--output_dir", run, cwd=root),
        ]
        for command in commands:
            command["args"] = [_text(arg, root) for arg in command["args"]]
            command["stdout"] = _text(command["stdout"], root)
            command["stderr"] = _text(command["stderr"], root)
        files = {}
        for folder, _, names in os.walk(root):
            for name in names:
                path = os.path.join(folder, name)
                relative = os.path.relpath(path, root)
                if relative.startswith(os.path.join("work", "digits")):
                    continue   # the dataset's cache, not the run's
                files[_name(relative)] = _content(path, root)
        return {"commands": commands, "files": dict(sorted(files.items()))}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("snapshot")
    parser.add_argument("--check", action="store_true",
                        help="compare with SNAPSHOT instead of writing it")
    args = parser.parse_args()
    taken = json.loads(json.dumps(snapshot()))
    if not args.check:
        with open(args.snapshot, "w", encoding="utf-8") as handle:
            json.dump(taken, handle, indent=1, sort_keys=True)
            handle.write("\n")
        return 0
    with open(args.snapshot, encoding="utf-8") as handle:
        recorded = json.load(handle)
    if taken == recorded:
        print(f"run files: as in {args.snapshot}")
        return 0
    for part in ("commands", "files"):
        if taken[part] != recorded[part]:
            print(f"run files: {part} differ from {args.snapshot}:")
            print(json.dumps(taken[part], indent=1, sort_keys=True)[:20000])
    return 1


if __name__ == "__main__":
    sys.exit(main())
