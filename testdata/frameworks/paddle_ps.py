"""A PaddlePaddle parameter-server job's roles, with the real framework
(the CPU build): the job the framework tests run under `coordinator run
--framework paddle --ps N` and as the seeds' wide-and-deep PaddleJob.

Every process calls fleet.init(PaddleCloudRoleMaker()) in static mode, as
a parameter-server script does: PaddlePaddle's role maker
(python/paddle/distributed/fleet/base/role_maker.py, _ps_env) reads the
variables the launcher gives (launch/controllers/ps.py) and decides who
is a server and who a worker, their indices and endpoints; with
PADDLE_WITH_GLOO=1 server 0 serves the gloo HTTP store
(PADDLE_GLOO_HTTP_ENDPOINT) and the workers form their gloo group there.

The parameter servers' training itself (fleet.init_server/run_server,
the_one_ps) is not in the PyPI CPU wheel: it is built without PSCORE
(core.DistFleetWrapper and CommContext are absent). So past fleet.init
the servers only stay up, as a server does while it serves, and the
workers train a small linear model data-parallel: their gradients summed
with fleet.util.all_reduce over the workers' gloo group, PaddlePaddle's
own. Worker 0 saves the parameters every SAVE_EVERY steps to
PADDLE_DIR/checkpoint.npz (tmp + rename), and a generation resumes from
it. Each process appends to PADDLE_DIR/steps.log:

    [paddle-ps] gen G server I of N at ENDPOINT
    [paddle-ps] gen G rank R world W step S loss L digest D

(R is the worker's index; D a hash of the parameters after the step,
which every worker of a step must share). STEPS steps in all (for ever if
0), STEP_SECONDS apart.
"""

import hashlib
import os
import time

os.environ.setdefault("FLAGS_enable_pir_api", "0")  # the parameter-server API is the old static graph's

import numpy as np
import paddle
import paddle.distributed.fleet as fleet

env = os.environ
directory = env["PADDLE_DIR"]
steps = int(env.get("STEPS", "0"))
step_seconds = float(env.get("STEP_SECONDS", "0.05"))
save_every = int(env.get("SAVE_EVERY", "5"))
gen = int(env.get("ELASTIC_GENERATION", "0"))

# Server 0's gloo store logs to http.log in the working directory
# (fleet/utils/http_server.py): the job's own, not the tests'.
os.chdir(directory)
paddle.enable_static()
fleet.init(fleet.PaddleCloudRoleMaker())
log = open(os.path.join(directory, "steps.log"), "a")


def say(line):
    print(line, flush=True)
    log.write(line + "\n")  # one write of a short line: whole, beside the other processes'
    log.flush()


if fleet.is_server():
    index = fleet.server_index()
    say("[paddle-ps] gen %d server %d of %d at %s" % (gen, index, fleet.server_num(), fleet.server_endpoints()[index]))
    while True:  # serving, until the sidecar stops the generation
        time.sleep(1)

rank, world = fleet.worker_index(), fleet.worker_num()
checkpoint = os.path.join(directory, "checkpoint.npz")
weights, step = np.zeros(8), 0
if os.path.exists(checkpoint):
    with np.load(checkpoint) as saved:
        weights, step = saved["weights"], int(saved["step"])
say("[paddle-ps] gen %d worker %d of %d (endpoints %s) from step %d, pid %d"
    % (gen, rank, world, ",".join(fleet.worker_endpoints()), step, os.getpid()))
fleet.util.barrier("worker")

target = np.linspace(-1, 1, 8)
while steps == 0 or step < steps:
    began = time.monotonic()
    step += 1
    rng = np.random.default_rng(step * 1000 + rank)  # each worker its own shard of the step's data
    x = rng.standard_normal((16, 8))
    error = x @ weights - x @ target
    gradient = np.asarray(fleet.util.all_reduce(x.T @ error / len(x), "sum", "worker")) / world
    weights = weights - 0.05 * gradient
    loss = float(fleet.util.all_reduce(np.array([np.mean(error**2)]), "sum", "worker")[0]) / world
    say("[paddle-ps] gen %d rank %d world %d step %d loss %.6f digest %s"
        % (gen, rank, world, step, loss, hashlib.sha256(weights.tobytes()).hexdigest()[:16]))
    if rank == 0 and step % save_every == 0:
        tmp = checkpoint + ".tmp.npz"
        np.savez(tmp, weights=weights, step=step)
        os.replace(tmp, checkpoint)
    time.sleep(max(0.0, step_seconds - (time.monotonic() - began)))
say("[paddle-ps] gen %d rank %d done at step %d" % (gen, rank, step))
