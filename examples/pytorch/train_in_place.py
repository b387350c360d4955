"""Elastic data-parallel training in place: a fault costs the survivors no restart.

The same training as train.py, written against elastic.run: everything
before it (imports, the model, the optimizer, whatever a real job spends
its start-up on) runs once per process; train(gen) runs once per
generation. When the job's membership changes (a peer killed, hung or lost
with its node, a scale up or down) the survivors keep their process: run()
tears the process group down, forms the next generation's in the same
process, hands every rank the freshest state (a survivor's, or the
sidecars' memory copy of the last save) and calls train again from the
step every rank agrees on. With --in-place, a node that holds no rank
starts this script ahead and keeps it waiting in run(): a started spare,
which takes a lost rank with no start-up at all.

    coordinator run --np 2 --spares 1 --in-place -- /usr/bin/python3 examples/pytorch/train_in_place.py

Outside a sidecar (`coordinator python-module DIR`, PYTHONPATH=DIR) it
trains once, as a plain script, in a world of one. --startup-s stands in
for a real job's start-up (CUDA context, communicators, weights,
compilation): paid once per process, never per fault. Rank 0 appends
"generation,world_size,step,loss,digest" to --loss-log after every step
(digest: a hash of the parameters and the optimizer's state), so that a run
can be checked against an uninterrupted one.
"""

import argparse
import hashlib
import math
import time

import elastic  # on the trainers' path under every sidecar
import torch
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="steps to train")
    p.add_argument("--batch", type=int, default=512, help="global batch size")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--loss-log", default="", help="file rank 0 appends its losses to")
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step, to watch it")
    p.add_argument("--startup-s", type=float, default=0.0, help="a stand-in for a real job's start-up, in seconds")
    return p.parse_args()


def batch(step, rank, world, size):
    """This rank's share of the global batch of a step: the same data whatever the world size."""
    g = torch.Generator().manual_seed(step)
    x = torch.rand(size, 1, generator=g) * 2 * math.pi
    y = torch.sin(x) + 0.05 * torch.randn(size, 1, generator=g)
    return x[rank::world], y[rank::world]


# The start-up: once per process, kept across generations.
args = parse_args()
time.sleep(args.startup_s)
torch.manual_seed(0)
model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
loss_fn = nn.MSELoss()


def digest():
    """A hash of the parameters and the optimizer's state: the same on every rank at every step."""
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(t.detach().numpy().tobytes())
    for s in opt.state.values():
        for v in s.values():
            if torch.is_tensor(v):
                h.update(v.detach().numpy().tobytes())
    return h.hexdigest()[:16]


def train(gen):
    """One generation: gen.rank of gen.world_size, from step gen.step."""
    ddp = DistributedDataParallel(model)  # this generation's process group
    if gen.rank == 0:
        how = "in place" if gen.in_place else "a started spare" if gen.spare else "a new process"
        print(f"generation {gen.generation}: world size {gen.world_size}, from step {gen.step}, rank 0 {how}", flush=True)
    for step in gen.steps(args.steps):
        x, y = batch(step, gen.rank, gen.world_size, args.batch)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # gradients are averaged over the ranks here
        opt.step()
        # A copy in the sidecars' memory: what a new process resumes from
        # when no survivor holds a fresher state.
        elastic.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step})
        if gen.rank == 0:
            if args.loss_log:
                with open(args.loss_log, "a") as f:
                    f.write(f"{gen.generation},{gen.world_size},{step + 1},{loss.item():.6f},{digest()}\n")
            if (step + 1) % 10 == 0:
                print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        if args.step_time:
            time.sleep(args.step_time)
    if gen.rank == 0:
        print("done", flush=True)


elastic.run(train, state={"model": model, "optimizer": opt})
