"""A stand-in for a PaddlePaddle collective trainer: it reads the variables
the way paddle.distributed.init_parallel_env() does
(python/paddle/distributed/parallel.py, PaddlePaddle 3.x) and fails the
way it fails; then rank 0 serves the job's store, as Paddle's TCP store
(paddle/phi/core/distributed/store/store_utils.cc) does, at PADDLE_MASTER,
else the first trainer endpoint, and every rank meets there.

STANDIN_CUDA=1 makes it a CUDA build, which wants FLAGS_selected_gpus
unless the backend is gloo."""

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin import connect, fail, listen, receive, record, send, train  # noqa: E402

env = os.environ


def needed(name):
    if not env.get(name):
        fail("ValueError: paddle.distributed initialize error, environment variable %s is needed, but not set." % name)
    return env[name]


backend = env.get("PADDLE_DISTRI_BACKEND", "auto")
if backend not in ("nccl", "gloo", "bkcl", "auto", "heter", "xccl", "flagcx"):
    fail("ValueError: paddle.distributed initialize error, backend argument can only be one of "
         "'nccl', 'gloo', 'bkcl', 'auto', 'heter', 'xccl' but got %s" % backend)
cuda = env.get("STANDIN_CUDA") == "1"
cpu_only = backend == "gloo" or not cuda
if not cpu_only:
    device = int(needed("FLAGS_selected_gpus").split(",")[0])
rank = int(needed("PADDLE_TRAINER_ID"))
needed("PADDLE_CURRENT_ENDPOINT")
world = int(needed("PADDLE_TRAINERS_NUM"))
if not (0 <= rank < world):
    fail("AssertionError: rank %d, world size %d" % (rank, world))
store = env.get("PADDLE_MASTER") or env["PADDLE_TRAINER_ENDPOINTS"].split(",")[0]
host, port = store.rsplit(":", 1)
host, port = host.strip("[]"), int(port)
record("paddle", backend="gloo" if cpu_only else "nccl", rank=rank, world=world,
       device=None if cpu_only else device)
if world > 1:
    if rank == 0:
        try:
            server = listen(host, port)
        except OSError as e:
            fail("the store of rank 0 at %s: %s" % (store, e))
        conns = [server.accept()[0] for _ in range(world - 1)]
        for c in conns:
            send(c, {"ok": True})
    else:
        try:
            c = connect(host, port, 60)
        except OSError as e:
            fail("rank %d cannot reach the store at %s: %s" % (rank, store, e))
        receive(c.makefile("r"))
train()
