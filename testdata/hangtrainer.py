"""A two-rank DDP job in plain PyTorch that the hang tests make hang.

It imports nothing of the coordinator's (but for elastic.quiet, when
HANG_QUIET asks for it): its optimizer steps are what the hang watch counts.
Each rank prints "hangtest gen=G rank=R ..." lines: its pid, each step,
and what it does instead of stepping.

    HANG_DIR          where the test leaves "finish", and a rank notes a SIGTERM
    HANG_STEPS        steps to train; unset, it trains until HANG_DIR/finish exists
    HANG_BLOCK_AFTER  N[@G,...]: after step N (of generations G), rank 1 blocks in
                      blocked_in_the_data_loader for HANG_BLOCK_SECONDS (default: ever)
    HANG_STOP_AFTER   N[@G,...]: after step N, rank 1 stops itself (SIGSTOP)
    HANG_PAUSE_AFTER  N[@G,...]: after step N, every rank pauses HANG_PAUSE seconds,
                      inside elastic.quiet(HANG_QUIET) when HANG_QUIET is set;
                      HANG_PAUSE_RANKS=0 makes it rank 0's alone (the others wait
                      for it in their next allreduce)
"""

import os
import select
import signal
import sys
import time

import torch
import torch.distributed as dist
from torch import nn
from torch.nn.parallel import DistributedDataParallel

env = os.environ.get
gen, rank = int(env("ELASTIC_GENERATION")), int(env("RANK"))
here = env("HANG_DIR")


def say(what):
    print("hangtest gen=%d rank=%d %s" % (gen, rank, what), flush=True)


def when(name):
    """The step after which the thing name says happens in this generation; None for never."""
    value = env(name, "")
    if not value:
        return None
    after, _, gens = value.partition("@")
    return int(after) if not gens or str(gen) in gens.split(",") else None


def noted_sigterm(*_):
    open(os.path.join(here, "sigterm-%d-%d" % (gen, rank)), "w").close()


def blocked_in_the_data_loader(step, seconds):
    """A read that does not return for seconds, as from a filesystem gone
    away. A SIGTERM is noted and changes nothing, as for a rank blocked in
    C code: noted whichever of the process's threads (gloo has several) it
    was delivered to, as its wakeup fd wakes this one."""
    r, w = os.pipe()
    os.set_blocking(w, False)
    signal.set_wakeup_fd(w)
    signal.signal(signal.SIGTERM, noted_sigterm)
    say("blocks after step %d" % step)
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        if select.select([r], [], [], max(end - time.monotonic(), 0))[0]:
            os.read(r, 512)
    say("unblocks")


def pause(step, seconds):
    """An evaluation: no progress for seconds, declared when HANG_QUIET is set."""
    say("pauses after step %d" % step)
    if env("HANG_QUIET"):
        import elastic

        with elastic.quiet(float(env("HANG_QUIET"))):
            time.sleep(seconds)
    else:
        time.sleep(seconds)
    say("resumes")


def finished():
    """Whether rank 0 saw HANG_DIR/finish: every rank leaves the loop together."""
    done = torch.tensor([1.0 if rank == 0 and os.path.exists(os.path.join(here, "finish")) else 0.0])
    dist.all_reduce(done)
    return done.item() > 0


dist.init_process_group("gloo")
say("pid=%d" % os.getpid())
model = DistributedDataParallel(nn.Linear(4, 1))
opt = torch.optim.SGD(model.parameters(), lr=0.01)
steps = int(env("HANG_STEPS", "0"))
block, stop, pause_at = when("HANG_BLOCK_AFTER"), when("HANG_STOP_AFTER"), when("HANG_PAUSE_AFTER")
step = 0
while (step < steps) if steps else not finished():
    if rank == 1 and step == block:
        blocked_in_the_data_loader(step, float(env("HANG_BLOCK_SECONDS", "1e9")))
    if rank == 1 and step == stop:
        say("stops after step %d" % step)
        os.kill(os.getpid(), signal.SIGSTOP)
    if step == pause_at and env("HANG_PAUSE_RANKS", str(rank)) == str(rank):
        pause(step, float(env("HANG_PAUSE")))
    loss = model(torch.randn(8, 4)).pow(2).mean()
    opt.zero_grad()
    loss.backward()
    opt.step()
    step += 1
    say("step=%d" % step)
    time.sleep(0.05)
say("done")
# Both ranks finished their last collective. torch 1.13's gloo sometimes
# aborts in its teardown ("terminate called without an active exception",
# exit 134) when the process group is destroyed or the interpreter ends
# with its threads about; a test that counts generations must not see that
# as a failure, so the process ends here.
sys.stdout.flush()
sys.stderr.flush()
os._exit(0)
