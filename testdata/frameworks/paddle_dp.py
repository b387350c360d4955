"""A real PaddlePaddle data-parallel job on the CPU (gloo): the job the
framework tests run under `coordinator run --framework paddle` and as a
PaddleJob.

It is a plain Paddle script, as a user writes one for
paddle.distributed.launch: init_parallel_env() reads the variables the
launcher gives (python/paddle/distributed/parallel.py), paddle.DataParallel
all-reduces the gradients. Rank 0 saves the model and optimizer every
SAVE_EVERY steps (tmp + rename) to PADDLE_DIR/checkpoint.pdparams, and a
generation resumes from it. Every step each rank prints, and appends to
PADDLE_DIR/steps.log (paddle.distributed.launch keeps its processes'
output in its log directory),

    [paddle] gen G rank R world W step S loss L digest D

where D is a hash of the parameters after the step: every rank of a step
must hold the same. STEPS steps in all (for ever if 0), STEP_SECONDS apart.

With BENCH_LOG_DIR set (bench/recovery -suite paddle), each process also
appends to BENCH_LOG_DIR/<pid>.log the benchmark's own lines (see
bench/recovery/trainer.py): "start <unix time> cold" before Paddle is
imported, and "step <unix time> <generation> <rank> <world> <step>" after
each step.
"""

import hashlib
import os
import time

bench_log = None
if os.environ.get("BENCH_LOG_DIR"):
    bench_log = open(os.path.join(os.environ["BENCH_LOG_DIR"], "%d.log" % os.getpid()), "a", buffering=1)
    bench_log.write("start %.6f cold\n" % time.time())

import numpy as np
import paddle
import paddle.distributed as dist

env = os.environ
directory = env["PADDLE_DIR"]
steps = int(env.get("STEPS", "0"))
step_seconds = float(env.get("STEP_SECONDS", "0.05"))
save_every = int(env.get("SAVE_EVERY", "5"))
gen = int(env.get("ELASTIC_GENERATION", "0"))

paddle.set_device("cpu")
dist.init_parallel_env()
rank, world = dist.get_rank(), dist.get_world_size()

paddle.seed(0)
model = paddle.nn.Sequential(paddle.nn.Linear(8, 32), paddle.nn.ReLU(), paddle.nn.Linear(32, 1))
opt = paddle.optimizer.Adam(learning_rate=1e-2, parameters=model.parameters())
checkpoint = os.path.join(directory, "checkpoint.pdparams")
step = 0
if os.path.exists(checkpoint):
    state = paddle.load(checkpoint)
    model.set_state_dict(state["model"])
    opt.set_state_dict(state["opt"])
    step = int(state["step"])
log = open(os.path.join(directory, "steps.log"), "a")


def say(line):
    print(line, flush=True)
    log.write(line + "\n")  # one write of a short line: whole, beside the other ranks'
    log.flush()


say("[paddle] gen %d rank %d world %d from step %d, pid %d" % (gen, rank, world, step, os.getpid()))
ddp = paddle.DataParallel(model)


def digest():
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.numpy().tobytes())
    return h.hexdigest()[:16]


while steps == 0 or step < steps:
    began = time.monotonic()
    step += 1
    rng = np.random.default_rng(step * 1000 + rank)  # each rank its own shard of the step's data
    x = paddle.to_tensor(rng.standard_normal((16, 8)).astype("float32"))
    y = x.sum(axis=1, keepdim=True) * 0.5
    loss = paddle.nn.functional.mse_loss(ddp(x), y)
    loss.backward()
    opt.step()
    opt.clear_grad()
    say("[paddle] gen %d rank %d world %d step %d loss %.6f digest %s" % (gen, rank, world, step, float(loss), digest()))
    if bench_log:
        bench_log.write("step %.6f %d %d %d %d\n" % (time.time(), gen, rank, world, step))
    if rank == 0 and step % save_every == 0:
        tmp = checkpoint + ".tmp"
        paddle.save({"model": model.state_dict(), "opt": opt.state_dict(), "step": step}, tmp)
        os.replace(tmp, checkpoint)
    time.sleep(max(0.0, step_seconds - (time.monotonic() - began)))
say("[paddle] gen %d rank %d done at step %d" % (gen, rank, step))
