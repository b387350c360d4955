"""A real MindSpore data-parallel job on the CPU: the job the framework
tests run under `coordinator run --framework mindspore` and as an MSJob.

MindSpore's dynamic cluster, as msrun starts it: the same script runs as
the scheduler (MS_ROLE=MS_SCHED), whose init() serves the cluster and
never returns, and as every worker (MS_ROLE=MS_WORKER), which trains with
DATA_PARALLEL over MindSpore's own CPU collectives (mccl;
mindspore/communication/management.py). Worker 0 saves the parameters
every SAVE_EVERY steps to MS_DIR/checkpoint.ckpt (tmp + rename), and a
generation resumes from it. Every step each worker prints, and appends to
MS_DIR/steps.log,

    [mindspore] gen G rank R world W step S loss L digest D

where D is a hash of the parameters after the step: every rank of a step
must hold the same. STEPS steps in all (for ever if 0), STEP_SECONDS apart.
"""

import hashlib
import os
import time

import numpy as np
import mindspore as ms
from mindspore import Tensor, nn
from mindspore.communication import get_group_size, get_rank, init
from mindspore.context import ParallelMode

env = os.environ
directory = env["MS_DIR"]
steps = int(env.get("STEPS", "0"))
step_seconds = float(env.get("STEP_SECONDS", "0.05"))
save_every = int(env.get("SAVE_EVERY", "5"))
gen = int(env.get("ELASTIC_GENERATION", "0"))

ms.set_context(mode=ms.GRAPH_MODE)
ms.set_device("CPU")
init()  # the scheduler serves the cluster here until every worker is done
rank, world = get_rank(), get_group_size()
ms.set_auto_parallel_context(parallel_mode=ParallelMode.DATA_PARALLEL, gradients_mean=True)
ms.set_seed(1)

net = nn.SequentialCell(nn.Dense(8, 32), nn.ReLU(), nn.Dense(32, 1))
opt = nn.Adam(net.trainable_params(), learning_rate=1e-2)
train_step = nn.TrainOneStepCell(nn.WithLossCell(net, nn.MSELoss()), opt)
train_step.set_train()
checkpoint = os.path.join(directory, "checkpoint.ckpt")
step = 0
if os.path.exists(checkpoint):
    params = ms.load_checkpoint(checkpoint)
    step = int(params.pop("step").asnumpy())
    ms.load_param_into_net(train_step, params)
log = open(os.path.join(directory, "steps.log"), "a")


def say(line):
    print(line, flush=True)
    log.write(line + "\n")  # one write of a short line: whole, beside the other ranks'
    log.flush()


def digest():
    h = hashlib.sha256()
    for p in net.trainable_params():
        h.update(p.asnumpy().tobytes())
    return h.hexdigest()[:16]


say("[mindspore] gen %d rank %d world %d from step %d, pid %d" % (gen, rank, world, step, os.getpid()))
w = np.arange(1, 9, dtype=np.float32).reshape(8, 1) / 8
while steps == 0 or step < steps:
    began = time.monotonic()
    step += 1
    rng = np.random.default_rng(step * 1000 + rank)  # each rank its own shard of the step's data
    x = rng.standard_normal((16, 8)).astype(np.float32)
    loss = train_step(Tensor(x), Tensor(x @ w))
    say("[mindspore] gen %d rank %d world %d step %d loss %.6f digest %s" % (gen, rank, world, step, float(loss.asnumpy()), digest()))
    if rank == 0 and step % save_every == 0:
        tmp = checkpoint + ".tmp.ckpt"
        ms.save_checkpoint(train_step, tmp, append_dict={"step": step})
        os.replace(tmp, checkpoint)
    time.sleep(max(0.0, step_seconds - (time.monotonic() - began)))
say("[mindspore] gen %d rank %d done at step %d" % (gen, rank, step))
