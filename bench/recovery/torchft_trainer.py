"""trainer.py's job under torchft (torchft 0.2.0): the same 334k-parameter MLP
with Adam, the same data and the same steps padded to --step-ms, written as
torchft's own DDP example writes a job (train_ddp.py in pytorch/torchft):
ProcessGroupGloo, PGTransport for healing, a Manager with the model's and
the optimizer's state_dict/load_state_dict and min_replica_size=1,
torchft.DistributedDataParallel and torchft.Optimizer. It follows
torchft/manager.py (Manager, start_quorum, should_commit), torchft/ddp.py,
torchft/optim.py (OptimizerWrapper) and torchft/process_group.py
(ProcessGroupGloo).

One process is one replica group of size 1. The harness sets:
    TORCHFT_LIGHTHOUSE     the lighthouse, http://127.0.0.1:PORT
    REPLICA_GROUP_ID       this replica's index, 0..N-1; kept across restarts
    MASTER_ADDR/PORT       the replica group's TCPStore, which this process
                           serves (torchrun serves it in torchft's examples;
                           with one process a group there is no one else to)
    RANK=0, WORLD_SIZE=1   the process's rank within its replica group

Every process appends to $BENCH_LOG_DIR/<pid>.log, as trainer.py does:

    start <unix time> warm|cold                    first, before torch is imported
    step <unix time> <generation> <rank> <world> <step>   after each committed step

only for a step whose commit succeeded (manager.should_commit() True):
    <generation>  "<quorum id>.<participants>": the lighthouse's quorum id (the
                  Manager's _quorum_id; it has no public accessor), and the
                  step's participant count. The count is in it because it
                  changes within a quorum: a replica that joins a quorum heals
                  in its first step and does not participate in it (its
                  gradient is zeroed, manager.py allreduce/is_participating),
                  so that step has one participant fewer than the next. The
                  harness reads a change of generation as a new run of steps.
    <rank>        manager.participating_rank(): the replica's index among the
                  participants of the step's quorum, -1 while it heals (None)
    <world>       manager.num_participants()
    <step>        manager.current_step() after the commit: the steps committed,
                  so the first is 1 (trainer.py's is 0); a healed replica
                  takes the step of the peer it healed from.

One change to torchft's own code path: torchft 0.2.0's DDP comm hook
(torchft/ddp.py:76, `assert fut._fut`) fails when the allreduce's wait
raised, which a peer killed in the allreduce makes it do: _ManagedWork.wait
(torchft/manager.py:1322-1336) reports the error to the Manager and returns
False without building the future the hook then asserts on, so the
survivor dies of an AssertionError in backward(). FaultTolerantDDP's hook
hands DDP the unreduced bucket instead; the Manager already knows of the
error, so should_commit() fails the step and the optimizer does not step
on it (what manager.py's handling means to do).

A real job's start-up (imports, a CUDA context, weights) is stood in for by
a sleep (--startup-s) before the Manager is made: a Manager heartbeats to the
lighthouse from its creation, and the lighthouse waits for a replica that
heartbeats before it forms a quorum without it.
"""
import os
import sys
import time

_started = time.time()
_log = open(os.path.join(os.environ["BENCH_LOG_DIR"], f"{os.getpid()}.log"), "a", buffering=1)
_log.write(f"start {_started:.6f} {'warm' if 'torch' in sys.modules else 'cold'}\n")

import argparse  # noqa: E402
from datetime import timedelta  # noqa: E402

import torch  # noqa: E402
from torch.distributed import TCPStore  # noqa: E402
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo  # noqa: E402
from torchft.checkpointing.pg_transport import PGTransport  # noqa: E402


class FaultTolerantDDP(DistributedDataParallel):
    """torchft's DDP with a comm hook that survives a failed allreduce."""

    @staticmethod
    def _comm_hook(state, bucket):
        work = state.allreduce(bucket.buffer())
        if not work.wait():
            # The error is the Manager's now: this step will not commit.
            failed = torch.futures.Future()
            failed.set_result(bucket.buffer())
            return failed
        fut = work.get_future()
        # A _ManagedFuture's own future, as torchft's hook returns; or, once
        # an error made allreduce a no-op (_DummyWork), a plain one.
        return fut._fut if hasattr(fut, "_fut") else fut


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--step-ms", type=float, default=20.0, help="pad every step to this wall time")
    p.add_argument("--batch", type=int, default=4, help="samples a step")
    p.add_argument("--steps", type=int, default=0, help="stop after this step; 0 trains until killed")
    p.add_argument("--startup-s", type=float, default=0.0, help="a stand-in for a real job's start-up, paid once per process")
    p.add_argument("--pg-timeout-s", type=float, default=5.0,
                   help="ProcessGroupGloo's timeout (train_ddp.py's for gloo): a survivor the killed replica's "
                        "neighbours in the allreduce left waiting gives up after it")
    args = p.parse_args()

    torch.set_num_threads(1)
    replica = int(os.environ["REPLICA_GROUP_ID"])
    # The replica group's store, which the Manager joins as a client.
    store = TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), is_master=True, wait_for_workers=False)
    time.sleep(args.startup_s)

    torch.manual_seed(0)
    model = torch.nn.Sequential(
        torch.nn.Linear(128, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 512), torch.nn.ReLU(),
        torch.nn.Linear(512, 10),
    )
    adam = torch.optim.Adam(model.parameters(), lr=1e-3)

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        adam.load_state_dict(state["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": adam.state_dict()}

    # The Manager's and the transport's timeouts are train_ddp.py's.
    pg = ProcessGroupGloo(timeout=timedelta(seconds=args.pg_timeout_s))
    manager = Manager(
        pg=pg,
        min_replica_size=1,
        load_state_dict=load_state_dict,
        state_dict=state_dict,
        replica_id=f"bench_{replica}",
        # Advertised to the lighthouse and the peers: the loopback, as the
        # store's, not a host name the machine may not resolve.
        hostname=os.environ["MASTER_ADDR"],
        timeout=timedelta(seconds=30),
        checkpoint_transport=PGTransport(pg, timeout=timedelta(seconds=10), device=torch.device("cpu")),
    )
    ddp = FaultTolerantDDP(manager, model)
    optimizer = Optimizer(manager, adam)
    loss_fn = torch.nn.CrossEntropyLoss()

    while args.steps == 0 or manager.current_step() < args.steps:
        t0 = time.monotonic()
        step = manager.current_step()
        g = torch.Generator().manual_seed(step * 1000 + replica)
        x = torch.randn(args.batch, 128, generator=g)
        y = torch.randint(0, 10, (args.batch,), generator=g)
        optimizer.zero_grad(set_to_none=True)  # starts the step's quorum
        loss_fn(ddp(x), y).backward()  # the gradients' allreduce, over the quorum
        # optimizer.step() as torchft.optim.OptimizerWrapper.step does it, but
        # keeping should_commit's answer: only a committed step is logged.
        committed = manager.should_commit()
        if committed:
            adam.step()
        rest = args.step_ms / 1000 - (time.monotonic() - t0)
        if rest > 0:
            time.sleep(rest)
        if committed:
            rank = manager.participating_rank()
            world = manager.num_participants()
            _log.write(f"step {time.time():.6f} {manager._quorum_id}.{world} {-1 if rank is None else rank} {world} {manager.current_step()}\n")
    manager.shutdown()
    del store


if __name__ == "__main__":
    main()
