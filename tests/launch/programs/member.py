"""A cluster member that does no training: records its pid (and a grandchild's), optionally
listens on its TF_CONFIG address, then, once every member is up, exits with the code given
for its role or sleeps until it is stopped."""

import argparse
import json
import os
import socket
import subprocess
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--pid_dir", required=True)
parser.add_argument("--exit", default="", help="MEMBER:CODE, e.g. worker:1:3")
parser.add_argument("--listen", action="store_true", help="accept connections like a server")
parser.add_argument("--sleep", type=float, default=120)
args = parser.parse_args()

tf_config = json.loads(os.environ["TF_CONFIG"])
task = tf_config["task"]
members = sum(len(v) for v in tf_config["cluster"].values())
me = f"{task['type']}:{task['index']}"
if args.listen:  # SO_REUSEPORT, as gRPC does, next to the launcher's reservation
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    host, _, port = tf_config["cluster"][task["type"]][task["index"]].rpartition(":")
    server.bind((host, int(port)))
    server.listen()
grandchild = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(300)"])
with open(os.path.join(args.pid_dir, f"{me}.pids"), "w") as handle:
    handle.write(f"{os.getpid()} {grandchild.pid}\n")
print(f"hello from {me}", flush=True)
exiting, _, code = args.exit.rpartition(":")
if exiting == me:
    while len(os.listdir(args.pid_dir)) < members:  # exit once everybody is up
        time.sleep(0.05)
    if int(code):
        print(f"{me} fails on purpose", file=sys.stderr, flush=True)
    sys.exit(int(code))
time.sleep(args.sleep)
