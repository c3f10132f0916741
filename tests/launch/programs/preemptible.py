"""A member that behaves like a preemptible trainer, without TensorFlow: it beats for the
launcher's --hang_timeout, appends its pid to PID_DIR/MEMBER.pids, and finishes after
--run_s seconds. On SIGTERM it takes --save_s seconds to "save", writes PID_DIR/MEMBER.saved
and exits 143. With --preempt_once MEMBER that member exits 143 on its first run, once
every member is up, as if it had been preempted and had saved. With --fail MEMBER:SECONDS
that member exits 1 after that long, as TensorFlow makes a member whose peer went silent."""

import argparse
import json
import os
import signal
import sys
import time

from tfyard.distribute import heartbeat
from tfyard.errors import PREEMPTED_EXIT_CODE

parser = argparse.ArgumentParser()
parser.add_argument("--pid_dir", required=True)
parser.add_argument("--preempt_once", default="")
parser.add_argument("--run_s", type=float, default=120)
parser.add_argument("--save_s", type=float, default=0)
parser.add_argument("--fail", default="", help="MEMBER:SECONDS: exit 1 after that long")
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
me = f"{tf_config['task']['type']}:{tf_config['task']['index']}"
members = sum(len(v) for v in tf_config["cluster"].values())
heartbeat.start_from_env()


def save_and_exit(_signum, _frame):
    time.sleep(args.save_s)
    with open(os.path.join(args.pid_dir, f"{me}.saved"), "w") as handle:
        handle.write(f"{os.getpid()}\n")
    print(f"{me}: saved", flush=True)
    sys.exit(PREEMPTED_EXIT_CODE)


signal.signal(signal.SIGTERM, save_and_exit)
with open(os.path.join(args.pid_dir, f"{me}.pids"), "a") as handle:
    handle.write(f"{os.getpid()}\n")
print(f"{me}: up", flush=True)
marker = os.path.join(args.pid_dir, "preempted")
if me == args.preempt_once and not os.path.exists(marker):
    while len([f for f in os.listdir(args.pid_dir) if f.endswith(".pids")]) < members:
        time.sleep(0.05)
    open(marker, "w").close()
    print(f"{me}: preempted", flush=True)
    sys.exit(PREEMPTED_EXIT_CODE)
failing, _, after = args.fail.rpartition(":")
time.sleep(float(after) if failing == me else args.run_s)
if failing == me:
    print(f"{me}: my peer stopped answering", flush=True)
    sys.exit(1)
print(f"{me}: done", flush=True)
