"""A trainer that keeps its state with elastic.save alone: each rank counts
steps, saves {"step": N} after every one to the job's checkpoint path, and
resumes from elastic.load. No torch: the ranks do not talk to each other.

It appends "gen=G rank=R step=S" to $SAVE_DIR/starts.log when it starts
(S is the step it resumes from), writes the time it started to
$SAVE_DIR/gG-wW-rankR (W the world size) first thing, and writes the step
it last saved to $SAVE_DIR/rank-R.last, so that a test can tell the steps
a stop lost: the last saved before it, less the step the next start
resumed from.

    SAVE_DIR       where its checkpoint files and logs go
    SAVE_INTERVAL  seconds per step (default 0.05)
    SAVE_STEPS     if set, the rank ends (exit 0) once it saved this step
"""

import os
import time

env = os.environ.get
gen, rank = int(env("ELASTIC_GENERATION")), int(env("RANK", env("ELASTIC_RANK", "0")))
where = env("SAVE_DIR")
interval = float(env("SAVE_INTERVAL", "0.05"))
steps = int(env("SAVE_STEPS", "0"))
os.makedirs(where, exist_ok=True)
# First thing, before the imports (elastic imports torch where it is there).
started = os.path.join(where, "g%d-w%s-rank%d" % (gen, env("WORLD_SIZE", env("ELASTIC_WORLD_SIZE", "0")), rank))
with open(started + ".tmp", "w") as f:
    f.write("%.9f\n" % time.time())
os.replace(started + ".tmp", started)

import elastic  # noqa: E402
path = os.path.join(where, "rank-%d.ckpt" % rank)

state = elastic.load(path=path)
step = state["step"] if state else 0
with open(os.path.join(where, "starts.log"), "a") as log:
    log.write("gen=%d rank=%d step=%d\n" % (gen, rank, step))
last = os.path.join(where, "rank-%d.last" % rank)
while not steps or step < steps:
    time.sleep(interval)
    step += 1
    elastic.save({"step": step}, path=path)
    with open(last + ".tmp", "w") as f:
        f.write("%d\n" % step)
    os.replace(last + ".tmp", last)
elastic.flush()
