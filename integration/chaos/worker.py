"""The chaos suite's training process on the warm path, with checkpoints in memory.

It does what worker.sh does and logs the same lines to CHAOS_LOG:
    KIND GEN ROLE RANK PID TIME_US STEP WORLD_SIZE NODE
but resumes from elastic.load() (the sidecars' memory, the peer's replica,
or the file CHAOS_CKPT) and, on rank 0, saves every step with
elastic.save(); a step is logged as commit once the sidecar stored it
(elastic.flush() returned), so the invariant checker holds the memory
checkpoint to the rules of a committed one. It runs under --preload, so
that a fault's next generation starts in a warm interpreter.

Each step is a progress event for the sidecar's hang watch
(elastic.beat(step=N), no system call). The files CHAOS_STRAGGLE_DIR/NODE
(a step takes the seconds it holds) and CHAOS_DEADLOCK_DIR/NODE (naming
the pid that sleeps forever before its next step, alive, logging hang once
a second) are read as worker.sh reads them.
"""

import os
import signal
import sys
import time

import elastic

beat = float(os.environ.get("CHAOS_BEAT", "0.05"))
node = os.environ.get("CHAOS_NODE", "?")
gen = os.environ["ELASTIC_GENERATION"]
role = os.environ.get("ELASTIC_ROLE", "worker")
rank = os.environ["RANK"]
world = os.environ["WORLD_SIZE"]
ckpt = os.environ["CHAOS_CKPT"]
log_path = os.environ["CHAOS_LOG"]
slow_dir = os.environ.get("CHAOS_SLOW_DIR", "")
deadlock = os.path.join(os.environ.get("CHAOS_DEADLOCK_DIR", "/nonexistent"), node)
straggle = os.path.join(os.environ.get("CHAOS_STRAGGLE_DIR", "/nonexistent"), node)


def now_us():
    return time.time_ns() // 1000


step = 0
state = elastic.load(path=ckpt)
if isinstance(state, dict):
    step = int(state.get("step", 0))


def log(kind):
    line = "%s %s %s %s %d %d %d %s %s\n" % (kind, gen, role, rank, os.getpid(), now_us(), step, world, node)
    # One write of one line, appended: the lines of every process interleave whole.
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


log("start")

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
    log("term")


signal.signal(signal.SIGTERM, on_term)


def read_file(path):
    """The file's first line, "" when it is missing."""
    try:
        with open(path) as f:
            return f.readline().strip()
    except OSError:
        return ""


taken = 0  # steps this process took
while True:
    if term_at is not None and time.monotonic() - term_at >= delay:
        os._exit(143)
    # After the first step only, as worker.sh: before it, the start-up
    # budget watches a rank, not the hang timeout.
    if taken > 0 and read_file(deadlock) == str(os.getpid()):
        # Once a second a sign of life that is not progress: one that
        # outlived its generation would be seen.
        while term_at is None:
            log("hang")
            time.sleep(1)
        os._exit(143)
    step += 1
    taken += 1
    log("alive")
    elastic.beat(step=step)
    if rank == "0":
        try:
            elastic.save({"generation": int(gen), "step": step}, path=ckpt)
            elastic.flush()
            log("commit")
        except elastic.CheckpointError as e:
            print("chaos worker: save of step %d not stored: %s" % (step, e), file=sys.stderr)
    pause = beat
    slow = read_file(straggle)
    if slow:
        try:
            pause = float(slow)
        except ValueError:
            pass
    time.sleep(pause)
