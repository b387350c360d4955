"""The cost of elastic.save on a training step, under `coordinator run`.

    coordinator run --np 2 -- python3 bench/ckpt/save_cost.py [--hidden 350|1400] [--batch N]

Rank 0 trains an MLP with Adam for --steps steps without saving, then as many
saving every step, and prints: the synchronous part of save() (median, p90),
the time from save() to the copy stored in the sidecar (save + flush), and
the step time with and without a save every step. Rank 1 waits.
"""
import argparse
import os
import statistics
import time

import torch

import elastic

p = argparse.ArgumentParser()
p.add_argument("--hidden", type=int, default=350)  # 350: ~338k parameters, 4 MB with Adam's state
p.add_argument("--layers", type=int, default=3)
p.add_argument("--batch", type=int, default=64)
p.add_argument("--steps", type=int, default=200)
a = p.parse_args()
torch.set_num_threads(1)
rank = int(os.environ.get("RANK", "0"))
if rank != 0:
    time.sleep(3600)
layers = [torch.nn.Linear(256, a.hidden), torch.nn.ReLU()]
for _ in range(a.layers - 1):
    layers += [torch.nn.Linear(a.hidden, a.hidden), torch.nn.ReLU()]
model = torch.nn.Sequential(*layers, torch.nn.Linear(a.hidden, 10))
opt = torch.optim.Adam(model.parameters())
x, y = torch.randn(a.batch, 256), torch.randint(0, 10, (a.batch,))
params = sum(q.numel() for q in model.parameters())


def step():
    opt.zero_grad()
    torch.nn.functional.cross_entropy(model(x), y).backward()
    opt.step()


def state(i):
    return {"model": model.state_dict(), "optimizer": opt.state_dict(), "step": i}


for _ in range(20):
    step()
plain = []
for i in range(a.steps):
    t = time.perf_counter()
    step()
    plain.append(time.perf_counter() - t)
sync, saving = [], []
for i in range(a.steps):
    t = time.perf_counter()
    step()
    s = time.perf_counter()
    elastic.save(state(i))
    sync.append(time.perf_counter() - s)
    saving.append(time.perf_counter() - t)
elastic.flush()
stored = []
for i in range(20):
    t = time.perf_counter()
    elastic.save(state(i))
    elastic.flush()
    stored.append(time.perf_counter() - t)
ms = lambda v: "%.2f ms" % (v * 1e3)
q = lambda v, f: sorted(v)[int(len(v) * f)]
mb = (params * 3 * 4) / 1e6
print("parameters %d, state %.1f MB" % (params, mb))
print("save() synchronous part: median %s, p90 %s" % (ms(statistics.median(sync)), ms(q(sync, 0.9))))
print("save() to stored in the sidecar (save+flush): median %s" % ms(statistics.median(stored)))
print("step: %s without saving, %s saving every step (median); cost %.1f%%" % (
    ms(statistics.median(plain)), ms(statistics.median(saving)),
    100 * (statistics.median(saving) - statistics.median(plain)) / statistics.median(plain)))
os._exit(0)
