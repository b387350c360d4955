"""One rank of a world of 3 asked to leave while every rank steps, GENS times, through elastic.inplace.

argv: RANK PORT GENS MODE. Each generation trains a DDP model whose
gradients (16 MB, one bucket) take gloo a while to all-reduce, and each
rank is asked to leave 0.4 s after the generation formed, give or take
40 ms, as the guards of a stop ask theirs. MODE "leave" is what the
guard's leave does (_Group.leave); "cut" cuts at once, as before the ranks
stopped together. Prints, per generation, "gen G stopped at step S, clean"
(or "cut"), or "gen G hung" if a rank did not stop within 30 s.
"""

import os
import random
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP

import elastic.inplace as ip

rank, port, gens, mode = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="3", RANK=str(rank))
torch.set_num_threads(1)
torch.manual_seed(0)
model = torch.nn.Linear(2048, 2048)
random.seed(rank * 7919 + port)

for g in range(1, gens + 1):
    os.environ["ELASTIC_GENERATION"] = str(g)
    gen = ip.Generation(os.environ, in_place=g > 1)
    group = ip._Group(gen, "gloo", None)
    gen._group = group
    group.form()
    dist.barrier()
    ddp = DDP(model)
    threading.Timer(0.4 + random.uniform(-0.02, 0.02), group.leave if mode == "leave" else group.cut).start()
    hung = threading.Timer(30, lambda: (print("gen %d hung" % g, flush=True), os._exit(3)))
    hung.start()
    step, began = None, time.monotonic()
    try:
        for step in gen.steps():
            ddp(torch.randn(4, 2048)).sum().backward()
        raise AssertionError("the steps ended")
    except ip.GenerationOver:
        pass
    except RuntimeError:
        pass  # a collective that a cut ended
    how = "cut" if group.stopper is None or group.stopper.stop_at is None else "clean"
    del ddp
    group.destroy()
    hung.cancel()
    print("gen %d stopped at step %s, %s in %.2fs" % (g, step, how, time.monotonic() - began), flush=True)
    time.sleep(0.3)  # the next generation's rank 0 binds the port again
os._exit(0)
