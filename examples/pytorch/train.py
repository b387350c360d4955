"""Elastic data-parallel training with torch.distributed, unchanged under the sidecar.

The sidecar starts this script with torchrun's variables (RANK, WORLD_SIZE,
MASTER_ADDR, MASTER_PORT, LOCAL_RANK, ...), so init_method="env://" finds the
generation's rendezvous. When the job's membership changes, every process is
stopped and started again with the new world size: the script resumes from
the last checkpoint, as it must under any hot restart.

    coordinator run --np 2 -- /usr/bin/python3 examples/pytorch/train.py --ckpt-dir /tmp/ckpt

It learns a small regression (y = sin(x) + noise) with an MLP, shares every
batch across the ranks, and rank 0 checkpoints model, optimizer, step and
generation after every step, through elastic.fenced_replace: the rename
lands only while its generation is current, through the process's fence
watchdog, which answers even while the sidecar and the guard are frozen.
Outside a sidecar, put the module on the path first (`coordinator
python-module DIR`, PYTHONPATH=DIR). Rank 0 appends
"generation,world_size,step,loss" to --loss-log so that a run can be checked
afterwards.
"""

import argparse
import math
import os
import sys
import time

import elastic  # on the trainers' path under every sidecar
import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=200, help="steps to train")
    p.add_argument("--batch", type=int, default=512, help="global batch size")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--ckpt-dir", default=os.environ.get("CKPT_DIR", "/tmp/elastic-pytorch"))
    p.add_argument("--loss-log", default="", help="file rank 0 appends its losses to")
    p.add_argument("--step-time", type=float, default=0.0, help="extra seconds per step, to watch it")
    return p.parse_args()


def batch(step, rank, world, size):
    """This rank's share of the global batch of a step: the same data whatever the world size."""
    g = torch.Generator().manual_seed(step)
    x = torch.rand(size, 1, generator=g) * 2 * math.pi
    y = torch.sin(x) + 0.05 * torch.randn(size, 1, generator=g)
    return x[rank::world], y[rank::world]


def main():
    args = parse_args()
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    generation = os.environ.get("ELASTIC_GENERATION", "?")

    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(1, 32), nn.Tanh(), nn.Linear(32, 1))
    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=0.9)
    ckpt = os.path.join(args.ckpt_dir, "checkpoint.pt")
    start = 0
    if os.path.exists(ckpt):
        state = torch.load(ckpt)
        model.load_state_dict(state["model"])
        opt.load_state_dict(state["optimizer"])
        start = state["step"]
    ddp = DistributedDataParallel(model)
    if rank == 0:
        print(f"generation {generation}: world size {world}, resuming at step {start}", flush=True)

    loss_fn = nn.MSELoss()
    for step in range(start, args.steps):
        x, y = batch(step, rank, world, args.batch)
        opt.zero_grad()
        loss = loss_fn(ddp(x), y)
        loss.backward()  # gradients are averaged over the ranks here
        opt.step()
        if rank == 0:
            os.makedirs(args.ckpt_dir, exist_ok=True)
            tmp = f"{ckpt}.{os.getpid()}.tmp"
            torch.save({"model": model.state_dict(), "optimizer": opt.state_dict(), "step": step + 1,
                        "generation": generation}, tmp)
            try:
                # Renamed only while this generation is current and the node's
                # deadline ahead; outside a sidecar it is os.replace.
                elastic.fenced_replace(tmp, ckpt)
            except elastic.FencedError:
                os.remove(tmp)
                print(f"checkpoint of step {step + 1} refused: generation {generation} is over", flush=True)
                sys.exit(1)
            if args.loss_log:
                with open(args.loss_log, "a") as f:
                    f.write(f"{generation},{world},{step + 1},{loss.item():.6f}\n")
            if (step + 1) % 10 == 0:
                print(f"step {step + 1} loss {loss.item():.4f}", flush=True)
        if args.step_time:
            time.sleep(args.step_time)
    dist.barrier()
    dist.destroy_process_group()
    if rank == 0:
        print("done", flush=True)


if __name__ == "__main__":
    main()
