"""The chaos suite's training process that trains in place (elastic.run).

It logs the lines worker.py logs to CHAOS_LOG:
    KIND GEN ROLE RANK PID TIME_US STEP WORLD_SIZE NODE
but its process outlives generations: a "start" line opens each
generation it trains in (the same pid in several generations when it
survived a fault in place, or was a started spare), STEP counting the
steps the job has done. Every step is a real collective over the
generation's process group (an all_reduce of gloo), so a peer killed,
frozen or cut off stops it as it would stop a DDP job. Rank 0 saves every
step to the sidecars' memory (and so to the file CHAOS_CKPT, which the
sidecar writes at a slower interval) and logs commit once it is stored; a
process that holds no fresher state resumes from the newer of the two
(elastic.run's path), as worker.py does.

The invariants the suite checks then also say that no survivor is ever in
two generations: no line of generation g once generation g+1 has started.

The files under CHAOS_SLOW_DIR, CHAOS_DEADLOCK_DIR and CHAOS_STRAGGLE_DIR
are read as worker.py reads them.
"""

import os
import signal
import sys
import time

import torch
import torch.distributed as dist

import elastic

beat = float(os.environ.get("CHAOS_BEAT", "0.05"))
node = os.environ.get("CHAOS_NODE", "?")
role = os.environ.get("ELASTIC_ROLE", "worker")
log_path = os.environ["CHAOS_LOG"]
ckpt = os.environ["CHAOS_CKPT"]
slow_dir = os.environ.get("CHAOS_SLOW_DIR", "")
deadlock = os.path.join(os.environ.get("CHAOS_DEADLOCK_DIR", "/nonexistent"), node)
straggle = os.path.join(os.environ.get("CHAOS_STRAGGLE_DIR", "/nonexistent"), node)

# What the current generation is, for the lines and the signal handler.
where = {"gen": "0", "rank": "-1", "world": "0", "step": 0}


def now_us():
    return time.time_ns() // 1000


def log(kind):
    line = "%s %s %s %s %d %d %d %s %s\n" % (kind, where["gen"], role, where["rank"], os.getpid(), now_us(),
                                            where["step"], where["world"], node)
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


term_at = None
delay = 0.0


def on_term(signum, frame):
    global term_at, delay
    term_at = time.monotonic()
    slow = os.path.join(slow_dir, node) if slow_dir else ""
    if slow and os.path.exists(slow):
        try:
            with open(slow) as f:
                delay = float(f.read().strip() or "0")
        except (OSError, ValueError):
            delay = 0.0
    if where["rank"] != "-1":
        log("term")
    if delay <= 0:
        os._exit(143)


signal.signal(signal.SIGTERM, on_term)


def read_file(path):
    """The file's first line, "" when it is missing."""
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return ""


class Steps:
    """The state every rank must hold alike: the steps done, nothing else."""

    def __init__(self):
        self.done = 0

    def state_dict(self):
        return {"done": self.done}

    def load_state_dict(self, d):
        self.done = int(d["done"])


steps = Steps()


def train(gen):
    where.update(gen=str(gen.generation), rank=str(gen.rank), world=str(gen.world_size), step=gen.step)
    log("start")
    taken = 0  # steps taken in this generation
    one = torch.ones(1)
    for i in gen.steps():
        if term_at is not None and time.monotonic() - term_at >= delay:
            os._exit(143)
        # After the generation's first step only, as worker.py.
        if taken > 0 and read_file(deadlock) == str(os.getpid()):
            while term_at is None:
                log("hang")
                time.sleep(1)
            os._exit(143)
        dist.all_reduce(one)  # the generation's collective: a lost peer stops it
        where["step"] = steps.done = i + 1
        taken += 1
        log("alive")
        elastic.beat(step=i + 1)
        if gen.rank == 0:
            try:
                elastic.save({"steps": steps.state_dict(), "step": i}, path=ckpt)
                elastic.flush()
                log("commit")
            except elastic.CheckpointError as e:
                print("chaos worker: save of step %d not stored: %s" % (i + 1, e), file=sys.stderr)
        pause = beat
        slow = read_file(straggle)
        if slow:
            try:
                pause = float(slow)
            except ValueError:
                pass
        time.sleep(pause)
        if term_at is not None and time.monotonic() - term_at >= delay:
            os._exit(143)


elastic.run(train, state={"steps": steps}, path=ckpt)
