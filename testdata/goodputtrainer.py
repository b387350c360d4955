"""A two-rank PyTorch DDP job whose ranks name every step and save every
GOODPUT_EVERY steps: a resume goes back to the last save, and the steps
after it are trained again. Each rank prints "goodput gen=G rank=R step=N".

    GOODPUT_DIR    where its checkpoint file goes
    GOODPUT_EVERY  save every this many steps (default 10)
    GOODPUT_FAIL   N@G: rank 1 fails (exit 1) after step N of generation G
"""

import os
import sys
import time

import elastic
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

env = os.environ.get
gen, rank = int(env("ELASTIC_GENERATION")), int(env("RANK"))
every = int(env("GOODPUT_EVERY", "10"))
fail_after, _, fail_gen = env("GOODPUT_FAIL", "").partition("@")
path = os.path.join(env("GOODPUT_DIR"), "ckpt")

dist.init_process_group("gloo")
model = DistributedDataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
state = elastic.load(path=path)
step = state["step"] if state else 0
while True:
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    elastic.beat(step=step)
    print("goodput gen=%d rank=%d step=%d" % (gen, rank, step), flush=True)
    if rank == 0 and step % every == 0:
        elastic.save({"step": step, "model": model.state_dict()}, path=path)
    if rank == 1 and fail_after and str(gen) == fail_gen and step == int(fail_after):
        sys.stdout.flush()
        os._exit(1)
    time.sleep(0.02)
