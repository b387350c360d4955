"""A DDP trainer that trains in place (elastic.run): its process outlives generations.

Each step trains on the step's global batch, split across the ranks, so the
loss curve is the same at any world size. It prints, per step, a digest of
its parameters and optimizer state, which every rank must agree on.
STARTUP_SECONDS stands in for a real job's start-up (imports, CUDA context,
communicators, weights): a sleep before elastic.run, paid once per process.
"""

import hashlib
import os
import sys
import time

import torch
from torch.nn.parallel import DistributedDataParallel

import elastic

STEPS = int(os.environ.get("STEPS", "100"))
STEP_SECONDS = float(os.environ.get("STEP_SECONDS", "0.05"))
time.sleep(float(os.environ.get("STARTUP_SECONDS", "0")))

torch.manual_seed(0)
model = torch.nn.Linear(16, 1)
optimizer = torch.optim.SGD(model.parameters(), lr=0.005, momentum=0.9)
print("started pid %d" % os.getpid(), flush=True)


def digest():
    h = hashlib.sha256()
    for t in list(model.state_dict().values()):
        h.update(t.detach().numpy().tobytes())
    for s in optimizer.state.values():
        for v in s.values():
            if torch.is_tensor(v):
                h.update(v.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def batch(step, rank, world):
    g = torch.Generator().manual_seed(step)
    x = torch.randn(8, 16, generator=g)
    y = x.sum(dim=1, keepdim=True)
    n = 8 // world
    return x[rank * n:(rank + 1) * n], y[rank * n:(rank + 1) * n]


def train(gen):
    ddp = DistributedDataParallel(model)
    print("generation %d: rank %d of %d from step %d, pid %d, %s, digest %s" % (
        gen.generation, gen.rank, gen.world_size, gen.step, os.getpid(),
        "in place" if gen.in_place else "started spare" if gen.spare else "new", digest()), flush=True)
    for step in gen.steps(STEPS):
        x, y = batch(step, gen.rank, gen.world_size)
        loss = ((ddp(x) - y) ** 2).mean()
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        print("step %d loss %.6f digest %s" % (step, loss.item(), digest()), flush=True)
        elastic.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})
        time.sleep(STEP_SECONDS)


elastic.run(train, state={"model": model, "optimizer": optimizer})
