"""One rank of a world of 3 meeting twice on one store port, through elastic.inplace._Group.

argv: RANK PORT early|late. Generation 1: only the early ranks (0 and 1)
come; the formation is cut after 1 s, as the guard's leave cuts it when a
peer is lost. Generation 2: all three, the late one a new process. Prints
"gen2 formed" with an all_reduce's sum (3.0), or what failed.
"""

import os
import sys
import threading
import time

import elastic.inplace as ip

rank, port, who = int(sys.argv[1]), int(sys.argv[2]), sys.argv[3]
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), WORLD_SIZE="3", RANK=str(rank))


def generation(g):
    os.environ["ELASTIC_GENERATION"] = str(g)
    return ip.Generation(os.environ, in_place=False)


start = time.monotonic()
if who == "early":
    group = ip._Group(generation(1), "gloo", None)
    threading.Timer(1.0, group.cut).start()
    try:
        group.form()
        print("gen1 formed without its third rank", flush=True)
    except BaseException as e:
        print("gen1 cut after %.1fs: %s" % (time.monotonic() - start, type(e).__name__), flush=True)
    group.destroy()
time.sleep(max(0.0, 2.0 - (time.monotonic() - start)))

group = ip._Group(generation(2), "gloo", None)
threading.Timer(30, group.cut).start()  # the test's bound: a hang fails it
t = time.monotonic()
try:
    group.form()
    import torch
    import torch.distributed as dist

    x = torch.ones(1)
    dist.all_reduce(x)
    print("gen2 formed in %.2fs, sum %.1f" % (time.monotonic() - t, x.item()), flush=True)
except BaseException as e:
    print("gen2 failed after %.2fs: %r" % (time.monotonic() - t, e), flush=True)
os._exit(0)
