"""A real PyTorch DDP job for `make bench-recovery`: gloo on the CPU, a
334k-parameter MLP trained with Adam, each step padded to --step-ms of wall
time (compute, then sleep the rest: it stands for a GPU-bound step, whose
CPU is mostly idle). The batch is small (--batch 4) for that reason: with
Debian's generic BLAS a step's CPU work is then about 5 ms, well under the
pad, where a batch of 32 takes 18 ms and fills the 2 cores of a small
machine with 2 ranks.

Every process appends to its own log, $BENCH_LOG_DIR/<pid>.log:

    start <unix time> warm|cold                    first, before torch is imported:
                                                   warm when it already is (a warm
                                                   interpreter of --preload torch)
    step <unix time> <generation> <rank> <world> <step>   after each step

A step's line is written when the step is done and before its checkpoint is
saved, so that a step killed during its save still counts as done; the save's
time shows in the next step's interval. The generation is ELASTIC_GENERATION,
or torchrun's TORCHELASTIC_RESTART_COUNT + 1.

Checkpoints (--checkpoint):
  none    nothing is saved or loaded.
  disk    rank 0 saves to --path every --every steps with torch.save to a
          temporary file and a rename; every rank loads it at start.
  memory  rank 0 calls elastic.save(state, path=--path) every --every steps;
          every rank starts from elastic.load(path=--path).
The state is {"step", "model", "optim", "extra"}: "extra" is a buffer that
brings the whole state to --state-mb MiB when that is larger than the model
and Adam's moments (about 4 MiB).

A real job's start-up (imports, a CUDA context, communicators, weights,
compilation) is stood in for by a sleep (--startup-s), paid once per
process: after the process group forms, or, --in-place, before
elastic.run. With --in-place the loop runs in elastic.run(train, state=...):
a process keeps its model and optimizer across generations, and every rank
starts a generation from the freshest state any rank holds.

Faults and pauses for the hang suite (-suite hang):
  --hang-trigger  before each step, look for $BENCH_LOG_DIR/<pid>.hang (a stat,
                  a few microseconds); once it exists, sleep in
                  wait_forever_in_data_loader() until it is removed: a rank that
                  deadlocked, alive, in a function its stack names.
  --pause-every N --pause-s S
                  after every N-th step (and its checkpoint) every rank sleeps S
                  seconds in periodic_evaluation(), declaring nothing: a periodic
                  save or evaluation the hang timeout must let pass.
"""
import os
import sys
import time

_started = time.time()
_log = open(os.path.join(os.environ["BENCH_LOG_DIR"], f"{os.getpid()}.log"), "a", buffering=1)
_log.write(f"start {_started:.6f} {'warm' if 'torch' in sys.modules else 'cold'}\n")

import argparse  # noqa: E402

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402


def wait_forever_in_data_loader(trigger):
    """A deadlock: no step, no exit. It ends only when the harness removes
    the trigger, which it does not while it measures."""
    while os.path.exists(trigger):
        time.sleep(0.1)


def periodic_evaluation(seconds):
    """A long phase every rank goes through together, undeclared."""
    time.sleep(seconds)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--checkpoint", choices=["none", "disk", "memory"], default="disk")
    p.add_argument("--every", type=int, default=50, help="save every this many steps")
    p.add_argument("--path", default="", help="the checkpoint file")
    p.add_argument("--state-mb", type=int, default=0, help="make the saved state this many MiB")
    p.add_argument("--step-ms", type=float, default=20.0, help="pad every step to this wall time")
    p.add_argument("--batch", type=int, default=4, help="samples a step")
    p.add_argument("--steps", type=int, default=0, help="stop after this step; 0 trains until killed")
    p.add_argument("--hang-trigger", action="store_true", help="hang when $BENCH_LOG_DIR/<pid>.hang exists")
    p.add_argument("--pause-every", type=int, default=0, help="pause every rank after every this many steps")
    p.add_argument("--pause-s", type=float, default=0.0, help="how long a pause lasts, in seconds")
    p.add_argument("--startup-s", type=float, default=0.0, help="a stand-in for a real job's start-up, paid once per process")
    p.add_argument("--in-place", action="store_true", help="train in elastic.run: the process outlives generations")
    args = p.parse_args()
    if args.in_place:
        in_place(args)
        return
    if args.checkpoint != "none" and not args.path:
        p.error("--path is required with a checkpoint")

    torch.set_num_threads(1)
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    generation = os.environ.get("ELASTIC_GENERATION") or str(int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1)
    dist.init_process_group("gloo")
    time.sleep(args.startup_s)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    base = 3 * 4 * sum(t.numel() for t in model.parameters())  # weights and Adam's two moments
    extra = torch.zeros(max(0, args.state_mb * 2**20 - base) // 4)

    elastic = None
    if args.checkpoint == "memory":
        import elastic
    state = None
    if args.checkpoint == "disk" and os.path.exists(args.path):
        state = torch.load(args.path)
    elif elastic is not None:
        state = elastic.load(path=args.path)
    step = 0
    if state is not None:
        model.load_state_dict(state["model"])
        optim.load_state_dict(state["optim"])
        extra = state["extra"]
        step = state["step"]
    ddp = DDP(model)
    loss_fn = torch.nn.CrossEntropyLoss()

    prefix = f"{generation} {rank} {world}"
    trigger = os.path.join(os.environ["BENCH_LOG_DIR"], f"{os.getpid()}.hang") if args.hang_trigger else ""
    while args.steps == 0 or step < args.steps:
        if trigger and os.path.exists(trigger):
            wait_forever_in_data_loader(trigger)
        t0 = time.monotonic()
        g = torch.Generator().manual_seed(step * 1000 + rank)
        x = torch.randn(args.batch, 128, generator=g)
        y = torch.randint(0, 10, (args.batch,), generator=g)
        optim.zero_grad(set_to_none=True)
        loss_fn(ddp(x), y).backward()
        optim.step()
        rest = args.step_ms / 1000 - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
        _log.write(f"step {time.time():.6f} {prefix} {step}\n")
        step += 1
        if rank == 0 and args.checkpoint != "none" and step % args.every == 0:
            state = {"step": step, "model": model.state_dict(), "optim": optim.state_dict(), "extra": extra}
            if elastic is not None:
                elastic.save(state, path=args.path)
            else:
                tmp = f"{args.path}.tmp"
                torch.save(state, tmp)
                os.replace(tmp, args.path)
        if args.pause_every > 0 and step % args.pause_every == 0:
            periodic_evaluation(args.pause_s)
    dist.destroy_process_group()


def in_place(args):
    """The same job in elastic.run: set up once, then train(gen) per generation."""
    import elastic

    torch.set_num_threads(1)
    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    optim = torch.optim.Adam(model.parameters(), lr=1e-3)
    loss_fn = torch.nn.CrossEntropyLoss()
    time.sleep(args.startup_s)

    def train(gen):
        ddp = DDP(model)
        prefix = f"{gen.generation} {gen.rank} {gen.world_size}"
        for step in gen.steps(args.steps or None):
            t0 = time.monotonic()
            g = torch.Generator().manual_seed(step * 1000 + gen.rank)
            x = torch.randn(args.batch, 128, generator=g)
            y = torch.randint(0, 10, (args.batch,), generator=g)
            optim.zero_grad(set_to_none=True)
            loss_fn(ddp(x), y).backward()
            optim.step()
            rest = args.step_ms / 1000 - (time.monotonic() - t0)
            if rest > 0:
                time.sleep(rest)
            _log.write(f"step {time.time():.6f} {prefix} {step}\n")
            if gen.rank == 0 and args.checkpoint == "memory" and (step + 1) % args.every == 0:
                elastic.save({"step": step, "model": model.state_dict(), "optim": optim.state_dict()}, path=args.path)

    elastic.run(train, state={"model": model, "optim": optim})


if __name__ == "__main__":
    main()
