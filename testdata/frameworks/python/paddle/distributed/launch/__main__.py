"""A stand-in for python -m paddle.distributed.launch, collective mode,
with an HTTP master: it reads its flags and variables as PaddlePaddle's
launcher does and fails where it would misbehave. Sources (PaddlePaddle
3.x, python/paddle/distributed/):
  - launch/context/args_envs.py: PADDLE_MASTER, PADDLE_NNODES,
    PADDLE_RANK, PADDLE_NPROC_PER_NODE, PADDLE_JOB_ID, POD_IP; a flag
    given wins over its variable.
  - fleet/elastic/__init__.py (enable_elastic): PADDLE_ELASTIC_SERVER,
    PADDLE_ELASTIC_JOB_ID and PADDLE_ELASTIC_NP together start an elastic
    manager of its own on etcd: the stand-in fails instead.
  - launch/plugins/__init__.py: PADDLE_TRAINER_ENDPOINTS overrides the
    master and the node count; PADDLE_TRAINER_ID the rank.
  - launch/controllers/master.py (HTTPMaster): the node whose address is
    the master's binds the rendezvous there; sync_peers.
  - launch/controllers/collective.py (_build_pod_with_master): each
    process's variables; context/node.py: FLAGS_FIXED_PORT.
  - launch/context/device.py: CUDA_VISIBLE_DEVICES are the node's GPUs.
The training script is run as it is, or $STANDIN_TRAINER in its place
where it is not found (the images' scripts are not on this machine).
STANDIN_LOOPBACK=1 reaches every address on the loopback, for pods whose
IPs are not this machine's."""

import argparse
import json
import os
import random
import socket
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

here = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(here, "..", "..", "..", ".."))
from standin import fail, record  # noqa: E402

p = argparse.ArgumentParser()
for flag in ("master", "nnodes", "rank", "nproc_per_node", "job_id", "host", "log_dir", "devices", "ips"):
    p.add_argument("--" + flag)
p.add_argument("training_script")
p.add_argument("training_script_args", nargs=argparse.REMAINDER)
args = p.parse_args()
env = os.environ

if env.get("PADDLE_ELASTIC_SERVER") and env.get("PADDLE_ELASTIC_JOB_ID") and env.get("PADDLE_ELASTIC_NP"):
    fail("paddle.distributed.launch: PADDLE_ELASTIC_SERVER, PADDLE_ELASTIC_JOB_ID and PADDLE_ELASTIC_NP are set: "
         "its own elastic manager would run on %s" % env["PADDLE_ELASTIC_SERVER"])
if env.get("PADDLE_TRAINER_ENDPOINTS") or env.get("DISTRIBUTED_TRAINER_ENDPOINTS"):
    fail("paddle.distributed.launch: PADDLE_TRAINER_ENDPOINTS overrides the master and the node count")
master = args.master or env.get("PADDLE_MASTER")
nnodes = int(args.nnodes or env.get("PADDLE_NNODES") or "1")
rank = int(args.rank or env.get("PADDLE_RANK") or "-1")
if env.get("PADDLE_TRAINER_ID"):
    rank = int(env["PADDLE_TRAINER_ID"])
nproc = int(args.nproc_per_node or env.get("PADDLE_NPROC_PER_NODE") or "1")
job_id = args.job_id or env.get("PADDLE_JOB_ID") or "default"
ip = args.host or env.get("POD_IP") or socket.gethostbyname(socket.gethostname())
if master and master.startswith("etcd://"):
    fail("paddle.distributed.launch: an etcd master: its own elastic manager would run on " + master)
record("paddlelaunch", master=master, nnodes=nnodes, rank=rank, nproc=nproc)


def free_port():
    s = socket.socket()
    s.bind(("", 0))
    port = s.getsockname()[1]
    s.close()
    return port


fixed = env.get("FLAGS_FIXED_PORT")
ports = [int(fixed) + max(rank, 0) + i for i in range(nproc)] if fixed else [free_port() for _ in range(nproc)]
candidate = "%s:%d" % (ip, free_port())
info = {"rank": rank, "replicas": nproc, "candidate": candidate, "endpoints": ",".join("%s:%d" % (ip, q) for q in ports)}

kv = {}


class KV(BaseHTTPRequestHandler):
    def do_PUT(self):
        kv[self.path] = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.send_response(200)
        self.end_headers()

    def do_GET(self):
        body = json.dumps({k: v for k, v in kv.items() if k.startswith(self.path)}).encode()
        self.send_response(200)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *a):
        pass


def reach(host):
    return "127.0.0.1" if env.get("STANDIN_LOOPBACK") == "1" else host


def ready(host, port):
    host = reach(host)
    with socket.socket() as s:
        return s.connect_ex((host, port)) == 0


def http(method, host, port, path, body=None):
    c = socket.create_connection((reach(host), port), timeout=5)
    data = (body or "").encode()
    c.sendall(("%s %s HTTP/1.0\r\nContent-Length: %d\r\n\r\n" % (method, path, len(data))).encode() + data)
    out = b""
    while True:
        chunk = c.recv(65536)
        if not chunk:
            break
        out += chunk
    return out.split(b"\r\n\r\n", 1)[1].decode()


if nnodes < 2:
    peers = [info]
    rank = 0
else:
    if not master:
        fail("paddle.distributed.launch: no master for %d nodes" % nnodes)
    mhost, mport = master.rsplit(":", 1)
    mport = int(mport)
    if mhost in ("127.0.0.1", ip):
        time.sleep(random.random() * 0.2)
        while not ready(mhost, mport):
            try:
                server = HTTPServer(("", mport), KV)
            except OSError:
                time.sleep(0.1)
                continue
            threading.Thread(target=server.serve_forever, daemon=True).start()
            break
    end = time.time() + 60
    prefix = "/%s/info/" % job_id
    while True:
        try:
            http("PUT", mhost, mport, prefix + str(rank), json.dumps(info))
            peers = json.loads(http("GET", mhost, mport, prefix))
            if len(peers) >= nnodes:
                break
        except OSError:
            pass
        if time.time() > end:
            fail("paddle.distributed.launch: the master at %s never had %d nodes" % (master, nnodes))
        time.sleep(0.1)
    peers = [json.loads(peers[prefix + str(r)]) for r in range(nnodes)]

global_size = sum(q["replicas"] for q in peers)
offset = sum(q["replicas"] for q in peers[:rank])
visible = env.get("CUDA_VISIBLE_DEVICES")
devices = [str(i) for i in range(len(visible.split(",")))] if visible else []
script = args.training_script
if not os.path.exists(script) and env.get("STANDIN_TRAINER"):
    script = env["STANDIN_TRAINER"]
children = []
for i in range(nproc):
    e = dict(env)
    e.update({
        "PADDLE_MASTER": peers[0]["candidate"], "PADDLE_GLOBAL_SIZE": str(global_size), "PADDLE_LOCAL_SIZE": str(nproc),
        "PADDLE_GLOBAL_RANK": str(i + offset), "PADDLE_LOCAL_RANK": str(i), "PADDLE_NNODES": str(nnodes),
        "PADDLE_CURRENT_ENDPOINT": info["endpoints"].split(",")[i], "PADDLE_TRAINER_ID": str(i + offset),
        "PADDLE_TRAINERS_NUM": str(global_size), "PADDLE_RANK_IN_NODE": str(i),
        "PADDLE_TRAINER_ENDPOINTS": ",".join(q["endpoints"] for q in peers),
    })
    if devices:
        e["FLAGS_selected_gpus"] = ",".join(devices) if nproc == 1 else devices[i]
    else:
        e["PADDLE_DISTRI_BACKEND"] = "gloo"
    children.append(subprocess.Popen([sys.executable, script] + args.training_script_args, env=e))
# As controller.watch: a process that fails stops the others, and the
# launcher exits with its code (elastic_level -1).
while True:
    codes = [c.poll() for c in children]
    failed = [code for code in codes if code]
    if failed:
        for c in children:
            if c.poll() is None:
                c.terminate()
        for c in children:
            c.wait()
        sys.exit(failed[0] if failed[0] > 0 else 128 - failed[0])
    if all(code == 0 for code in codes):
        sys.exit(0)
    time.sleep(0.1)
