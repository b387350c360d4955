"""Training in place: a trainer that keeps its process across generations.

    import elastic

    model = Net()                                   # the start-up: once per process
    optimizer = torch.optim.SGD(model.parameters(), lr=0.01)

    def train(gen):                                 # once per generation
        ddp = DistributedDataParallel(model)        # this generation's process group
        for step in gen.steps(1000):                # from the step every rank agrees on
            loss = ddp(batch(step)).sum()
            optimizer.zero_grad(); loss.backward(); optimizer.step()
            elastic.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})

    elastic.run(train, state={"model": model, "optimizer": optimizer})

run() forms torch's default process group for the generation (a store of
its own at MASTER_ADDR:MASTER_PORT, under a prefix of the generation, gloo
unless told otherwise), makes every rank hold the same state, and calls
train(gen). When the generation ends (a peer killed, hung or lost with its
node, a scale up or down), the node's guard asks the process to leave.
While every rank steps, the ranks stop together at a step's start (see
_Stopper): gen.steps() raises GenerationOver there, with no collective in
flight. A rank blocked in a collective, on a peer that will never answer,
has its process group's connections cut instead, so the collective raises
at once. run() then destroys the group, tells the guard it left, and
waits, holding no rank, until the guard hands it the next generation's
environment (RANK, WORLD_SIZE, MASTER_ADDR, ...) under the node's current
lease. It calls train again, in the same process: the model, the optimizer,
the data loaders and whatever the script set up before run() are kept.

The state every rank agrees on: each rank says the step its state is at
(the next step to train): a process that trained in place knows it, one
that starts anew has what elastic.load() gives (the sidecars' memory copies
of the job's saves, in the format above: a dict of the state's keys and
"step", the last step done), or nothing. The freshest wins: a rank behind
it, or holding nothing, gets the state of the lowest rank that holds it,
broadcast over the new group. No rank rolls back and no step is trained
twice, unless no rank held a fresher state than the memory copy.

Outside a sidecar (no guard to ask), run() calls train once, as a plain
script does; RANK and WORLD_SIZE default to 0 and 1. An exception train
raises that is not the generation's end fails the process as before (a
RuntimeError or OSError, which c10d's collective and store errors are,
waits up to ELASTIC_REFORM_WAIT seconds, 10 by default, for the guard to
say the generation ended, then is raised).
"""

import datetime
import gc
import json
import os
import socket
import sys
import threading
import time

__all__ = ["run", "Generation", "GenerationOver"]

FENCE_SOCKET_ENV = "ELASTIC_FENCE_SOCKET"
# Set to 1 in a started spare: a process the guard started ahead, with no
# rank, to run its start-up and wait in run() for a generation.
SPARE_ENV = "ELASTIC_SPARE"
REFORM_WAIT_ENV = "ELASTIC_REFORM_WAIT"


class GenerationOver(Exception):
    """The generation ended: raised inside train by gen.steps(); run() catches it."""


class Generation:
    """One generation as this process sees it.

    rank, world_size, local_rank: this process's place; generation: its
    number; step: the step to train from, agreed by every rank; in_place:
    whether this process trained in an earlier generation; spare: whether
    it was a started spare, its start-up done ahead, until this one.
    """

    def __init__(self, env, in_place):
        self.rank = _int(env, "RANK", 0)
        self.world_size = _int(env, "WORLD_SIZE", 1)
        self.local_rank = _int(env, "LOCAL_RANK", 0)
        self.generation = _int(env, "ELASTIC_GENERATION", 0)
        self.in_place = in_place
        self.spare = False  # this process was a started spare until now
        self.step = 0
        self._held = None  # the step the state is at once interrupted; None: unknown
        # The last generation this process trained in: a process parked
        # since before the last generation may hold a state that
        # generation trained past (a scale down left it out).
        self._trained_in = None
        self._link = None
        self._group = None
        self._at_yield = None  # the optimizer steps counted when the current step began
        self._step_began = None  # time.monotonic() at the current step's start; None: not stepping

    def steps(self, total=None):
        """The steps of this generation, from the agreed one to total (for ever if None).

        Raises GenerationOver at a step's start once the generation is over:
        at the step every rank stops at, or at once if it was cut.
        """
        i = self.step
        while total is None or i < total:
            self._mark(i)
            if self._over(i):
                raise GenerationOver("generation %d is over" % self.generation)
            now = time.monotonic()
            if self._step_began is not None:
                _step_times.add(now - self._step_began)
            self._step_began = now
            yield i
            i += 1
        self._mark(i)
        self._step_began = None

    def _over(self, i):
        """Whether step i must not begin: the ranks stop here, or this one was cut."""
        group = self._group
        if group is not None:
            if group.cut_done:
                return True
            stopper = group.stopper
            if stopper is not None:
                # Once it has heard of a stop, it may wait here for the others.
                said = stopper.at_step()
                if said is _STOP:
                    group.together = not group.cut_done
                    return True
                if said is _NO_STOP:
                    group.cut()  # the store failed, or the others did not say in time
                    return True
                if group.cut_done:
                    return True
                if said is _LATER or group.stopping:
                    return False  # the ranks stop together, at a later step
        return self._link is not None and self._link.leaving.is_set()

    def _mark(self, i):
        self._held = i
        self._at_yield = _optimizer_steps()
        if i > 0:
            _resumed(i - 1)  # the guard's messages name the job's step

    def _state_step(self):
        """The step the state is at: the step begun, or the next if an optimizer stepped since."""
        if self._held is None:
            return None
        if self._at_yield is not None and _optimizer_steps() > self._at_yield:
            return self._held + 1
        return self._held


class _StepTimes:
    """The recent steps' durations, over generations: how long a step takes."""

    def __init__(self):
        self.recent = []

    def add(self, seconds):
        self.recent = (self.recent + [seconds])[-16:]

    def typical(self):
        """The median of the recent steps, or None before two steps."""
        if not self.recent:
            return None
        return sorted(self.recent)[len(self.recent) // 2]


_step_times = _StepTimes()


def _optimizer_steps():
    progress = sys.modules.get("elastic.progress")
    return getattr(progress, "optimizer_steps", 0) if progress is not None else 0


def _int(env, name, default):
    try:
        return int(env.get(name, ""))
    except ValueError:
        return default


class _Refused(Exception):
    pass


class _Link:
    """The connection to the node's guard: leave and run messages."""

    def __init__(self, name, generation):
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.sock.connect("\0" + name[1:] if name.startswith("@") else name)
        self.sock.sendall((json.dumps({"op": "inplace", "generation": generation}) + "\n").encode())
        self.reader = self.sock.makefile("rb")
        reply = self.reader.readline().decode(errors="replace").strip()
        if reply != "ok":
            self.sock.close()
            raise _Refused(reply or "no answer")
        self.leaving = threading.Event()
        self.cond = threading.Condition()
        self.run_message = None
        self.closed = False
        self.on_leave = None
        threading.Thread(target=self._read, name="elastic-inplace", daemon=True).start()

    def _read(self):
        try:
            for line in self.reader:
                try:
                    m = json.loads(line)
                except ValueError:
                    continue
                if m.get("op") == "leave":
                    # Told first, so that no step's start sees the leave
                    # before it knows how the ranks stop.
                    leave = self.on_leave
                    if leave is not None:
                        try:
                            leave()
                        except Exception:
                            pass  # the group's: it never ends this thread
                    self.leaving.set()
                elif m.get("op") == "run":
                    with self.cond:
                        self.run_message = m
                        self.cond.notify_all()
        except (OSError, ValueError):
            pass
        with self.cond:
            self.closed = True
            self.cond.notify_all()
        self.leaving.set()

    def left(self):
        self.sock.sendall(b'{"op":"left"}\n')

    def next_run(self):
        """Wait for the next generation's run message; None once the guard is gone."""
        with self.cond:
            while self.run_message is None and not self.closed:
                self.cond.wait()
            m, self.run_message = self.run_message, None
        if m is not None:
            self.leaving.clear()
        return m


def _connect(generation, spare=False):
    name = os.environ.get(FENCE_SOCKET_ENV, "")
    if not name or (generation < 1 and not spare):
        return None
    try:
        return _Link(name, generation)
    except _Refused as e:
        print("[elastic] this process cannot train in place (%s): it restarts with each generation" % e, file=sys.stderr)
    except OSError as e:
        print("[elastic] the guard cannot be reached (%s): this process restarts with each generation" % e, file=sys.stderr)
    return None


class _Group:
    """This generation's process group, and the sockets that leaving cuts.

    cut() may come from the guard's reader thread at any moment, during
    the group's formation too (a peer lost while the ranks wait for it):
    then every TCP socket opened since the formation began is cut, and a
    formation that has not opened its store yet stops at once.
    """

    def __init__(self, gen, backend, timeout):
        import torch.distributed as dist

        _import_before_any_group()
        self.dist = dist
        self.gen, self.backend = gen, backend
        self.kw = {"timeout": datetime.timedelta(seconds=timeout)} if timeout else {}
        self.lock = threading.Lock()
        self.port = _int(os.environ, "MASTER_PORT", 29500)
        self.before = _sockets()
        self.fds = None  # the group's sockets, once formed
        self.cut_done = False
        self.store = None
        self.stopper = None  # how the ranks stop together, once formed
        self.stopping = False  # a stop at a step every rank agrees on is under way
        self.together = False  # the ranks stopped together, at a step's start: nothing was cut
        self.timer = None  # the cut that follows a leave if the ranks do not stop together in time

    def form(self):
        dist, gen = self.dist, self.gen
        if gen.world_size == 1 and "MASTER_ADDR" not in os.environ:
            self.store = dist.HashStore()  # a script on its own: a world of one
        else:
            self.store = self._generation_store(os.environ.get("MASTER_ADDR", "127.0.0.1"))
        if self.cut_done:
            raise GenerationOver("generation %d is over" % gen.generation)
        prefix = dist.PrefixStore("elastic/%d/" % gen.generation, self.store)
        dist.init_process_group(self.backend, store=prefix, rank=gen.rank, world_size=gen.world_size, **self.kw)
        if gen.world_size > 1 and not isinstance(self.store, dist.HashStore):
            try:
                self.stopper = _Stopper(dist, os.environ.get("MASTER_ADDR", "127.0.0.1"), self.port, gen.world_size, self._uncut)
            except (RuntimeError, OSError):
                self.stopper = None  # a leave cuts
        with self.lock:
            self.fds = _new_sockets(self.before)
            if self.cut_done:
                self._shutdown(self.fds)

    def leave(self):
        """The guard asks this rank to leave: stop with the others at a step's start, or cut.

        A rank that steps (its current step began within a few steps'
        time) gives notice that the ranks stop (see _Stopper), and is cut
        only if it has not left by a deadline: a peer may have hung
        meanwhile. A rank that is forming its group, holds no step yet, or
        is blocked in its step (a peer frozen or lost) is cut at once.
        """
        try:
            began, typical = self.gen._step_began, _step_times.typical()
            now = time.monotonic()
            if (self.stopper is None or self.cut_done or began is None or typical is None
                    or now - began > 2 * typical + _BLOCKED_SLACK):
                self.cut()
                return
            self.stopping = True
            if self.stopper.heard is None and not self.stopper.propose(_PROPOSE_WAIT):
                self.cut()
                return
            self.timer = threading.Timer((_STOP_WITHIN + 1) * typical + _BLOCKED_SLACK, self.cut)
            self.timer.daemon = True
            self.timer.start()
        except Exception:
            self.cut()

    def _generation_store(self, addr):
        """This generation's store: rank 0 serves it, the others reach it.

        Rank 0 does not wait in the store for the others (c10d's
        wait_for_workers, which nothing can interrupt); a peer lost before
        it arrives ends the generation, and the cut ends the wait. The
        others wait, as long as the generation lasts, until rank 0's port
        accepts, and make sure the server there is this generation's: the
        port is the node's, so the last generation's rank 0 on the same
        node may still be serving it for a moment (its server says its
        generation under _GENERATION_KEY).
        """
        dist, gen = self.dist, self.gen
        while True:
            if self.cut_done:
                raise GenerationOver("generation %d is over" % gen.generation)
            if gen.rank == 0:
                store = _store(dist, addr, self.port, gen.world_size, True, self.kw)
                self._uncut()
                store.set(_GENERATION_KEY, str(gen.generation))
                return store
            if not _await_master(addr, self.port, lambda: self.cut_done):
                continue
            try:
                # Connected within a second or tried again: c10d's client
                # retries a refused connection for its whole timeout, and
                # the port accepted a moment ago may be the last
                # generation's server closing.
                store = dist.TCPStore(addr, self.port, gen.world_size, False, timeout=_CONNECT_TIMEOUT)
                self._uncut()
                store.set_timeout(self.kw.get("timeout", _STORE_TIMEOUT))
                served = int(store.get(_GENERATION_KEY))
            except (RuntimeError, OSError, ValueError):
                # Reset by the last generation's server as it closed, or
                # refused: try again while this generation lasts.
                time.sleep(0.02)
                continue
            if served == gen.generation:
                return store
            del store  # the last generation's server, still up
            time.sleep(0.02)

    def _uncut(self):
        """Raise GenerationOver if a cut came while a store was being made.

        cut() shuts the sockets there are when it comes; one the store
        opened after that would be left to wait, on a server that may
        never answer (the last generation's, closing), for the store's
        whole timeout. cut() sets cut_done before it looks, so a socket
        it missed was opened after cut_done was set, and this sees it.
        """
        if self.cut_done:
            raise GenerationOver("generation %d is over" % self.gen.generation)

    def cut(self):
        """Cut the group's connections: what waits on them raises now."""
        with self.lock:
            if self.cut_done:
                return
            self.cut_done = True
            self._shutdown(self.fds if self.fds is not None else _new_sockets(self.before))
        if self.stopper is not None:
            self.stopper.settled.set()  # a rank waiting for the stop's step stops now

    def disconnect(self):
        """At the generation's end, shut the group's connections to its peers, but the store's.

        From then on nothing passes between this process and the last
        generation, and it can say it left before its group is destroyed
        (destroy): gloo's destruction waits for its event loop's next tick,
        up to 10 ms a connection (gloo/transport/tcp/loop.cc), which would
        otherwise delay the leave, the node's ack and the next generation
        by tens of milliseconds. Shut first, the loop ticks at once. The
        store's connections are destroy's to close: the server's side would
        be polled shut for as long as it serves, and torch 1.13's client
        thread spins on a shut one.
        """
        self.end_stopper()
        with self.lock:
            for fd, link in (self.fds or {}).items():
                _shutdown(fd, link, self.port, store_clients_too=False)

    def _shutdown(self, fds):
        for fd, link in fds.items():
            _shutdown(fd, link, self.port)

    def end_stopper(self):
        """Stop waiting for a stop: train returned, and the group is the script's now."""
        if self.stopper is not None:
            self.stopper.close()

    def destroy(self):
        """Destroy the group and let go of everything of it: nothing of a generation is kept, frozen, by the next's gc.freeze."""
        with self.lock:
            self.cut_done = True
            self.fds = {}
        if self.timer is not None:
            self.timer.cancel()
        self.end_stopper()
        try:
            if self.dist.is_initialized():
                self.dist.destroy_process_group()
        except Exception:
            pass
        _reset_group_names(self.dist)
        self.store = self.stopper = self.gen = self.timer = None


def _import_before_any_group():
    """Import torch.distributed.nn.functional while no process group exists.

    Its functions take group=group.WORLD as a default argument, evaluated
    at import (torch/distributed/nn/functional.py, torch 1.13 and 2.x): an
    import while a generation's group exists keeps that group, its
    connections and the store it was formed in, alive for the life of the
    process, and rank 0's store then keeps the port the next generation's
    store must bind. torch 2's DDP imports it (through torch._dynamo) the
    first time a model is wrapped, inside the first generation.
    """
    try:
        import torch.distributed.nn.functional  # noqa: F401
    except Exception:
        pass  # a build without it: nothing imports it then


def _reset_group_names(dist):
    """Number the next generation's groups from 0 again, as a new process does.

    c10d names a process group by a counter, and keys its rendezvous and
    its barrier in the store by that name; destroy_process_group() resets
    the counter only if the default group was formed. A formation cut
    half-way leaves it counted: the next generation's rendezvous would
    then wait, under another name, for peers that never come.
    """
    c10d = getattr(dist, "distributed_c10d", None)
    if c10d is None:
        return
    if hasattr(c10d, "_group_count"):  # torch 1.x
        c10d._group_count = 0
    world = getattr(c10d, "_world", None)  # torch 2.x
    if world is not None and hasattr(world, "group_count"):
        try:
            world.group_count = 0
        except Exception:
            pass


# How many steps after the one it is in when it hears of a stop a rank
# stops at most: at the next step's start when every rank is in the same
# step, at the one after when a rank had begun the next already (a rank is
# at most one step ahead of another: a step's collectives need every rank).
_STOP_WITHIN = 2
# How much longer than two steps a step may take before its rank counts as
# blocked in it; and what a stop at a step's start gets beyond its steps.
_BLOCKED_SLACK = 0.25
# How long a notice waits for the store's answer before the rank is cut: a
# store that answers at all answers within milliseconds.
_PROPOSE_WAIT = 0.25
# The keys of a generation's store by which its ranks stop together (see
# _Stopper): the notice; the latest step a rank may stop at, raised by each
# rank to the step after the one it was in; how many ranks have raised it;
# and the step they stop at, set by the last of them.
_STOP_NOTICE_KEY = "elastic/stop-notice"
_STOP_LATEST_KEY = "elastic/stop-latest"
_STOP_HEARD_KEY = "elastic/stop-heard"
_STOP_AT_KEY = "elastic/stop-at"
# What _Stopper.at_step says at a step's start.
_NOT_HEARD, _LATER, _STOP, _NO_STOP = "not heard", "later", "stop", "no stop"


class _Stopper:
    """How the ranks of a generation stop together, at one step's start.

    Cutting a group's connections while every rank steps is not safe with
    gloo: a send that a closed connection interrupts half-way is never
    failed, and waits out the group's timeout (30 minutes by default;
    gloo/transport/tcp/pair.cc, Pair::signalException, signals the posted
    sends of bound buffers only). So a rank asked to leave gives notice in
    the generation's store, and every rank, hearing it on a thread of its
    own, says there the step it is in: the ranks stop at the start of the
    step after the latest of these. A rank that reaches the step after the
    one it heard in waits there, no collective in flight, until every rank
    has said (a few milliseconds: each hears at once); none can pass the
    step they stop at. With every rank in one step, that is the next
    step's start, half a step away on average.

    Each rank keeps two more connections to the store, made with the
    group: one to give notice on, whose answer it waits for a quarter of a
    second at most (a notice given at a leave must not wait for a
    connection, nor for a rank 0 that is stopped), and the thread's. Waits
    are on keys set with set(): compare_set wakes no waiter in torch 1.13.
    c10d raises a store's errors as RuntimeError or TimeoutError (an
    OSError): each is caught.
    """

    def __init__(self, dist, addr, port, world_size, uncut):
        self.world_size = world_size
        self.lock = threading.Lock()
        # Step starts are counted, not named by the script's step numbers:
        # every rank starts its steps in lockstep, whatever loops it runs.
        self.starts = 0  # the step starts seen (at_step)
        self.heard = None  # the index of the step start it was past when it heard of the stop, -1 for none; None: not heard
        self.stop_at = None  # the step start every rank stops at, once every rank has said where it was
        self.settled = threading.Event()  # stop_at is known, cannot be (the store is gone), or the group is cut
        self.port = port
        before = _sockets()
        self.proposer = dist.TCPStore(addr, port, world_size, False, timeout=_CONNECT_TIMEOUT)
        self.client = dist.TCPStore(addr, port, world_size, False, timeout=_CONNECT_TIMEOUT)
        uncut()
        self.fds = _new_sockets(before)
        self.thread = threading.Thread(target=self._watch, name="elastic-stop", daemon=True)
        self.thread.start()

    def at_step(self):
        """At a step's start: _STOP here, a stop comes _LATER, _NOT_HEARD of one, or _NO_STOP can be agreed.

        Once it has heard of a stop, it waits until every rank has said
        where it was: bounded by the cut a leave sets (three steps and a
        quarter of a second), since a rank that cannot say (frozen, or its
        store gone) holds the others here.
        """
        with self.lock:
            start = self.starts
            self.starts += 1
            heard = self.heard
        if heard is None:
            return _NOT_HEARD
        typical = _step_times.typical()
        if not self.settled.wait((_STOP_WITHIN + 1) * (typical if typical is not None else 1.0) + _BLOCKED_SLACK):
            return _NO_STOP
        if self.stop_at is None:
            return _NO_STOP
        return _STOP if start >= self.stop_at else _LATER

    def _watch(self):
        client = self.client
        try:
            client.wait([_STOP_NOTICE_KEY], _NOTICE_WAIT)
            with self.lock:
                # Under the lock: a step start that has not counted yet waits.
                self.heard = self.starts - 1
                want = self.starts
            latest = _text(client.compare_set(_STOP_LATEST_KEY, "", str(want)))
            while int(latest) < want:
                latest = _text(client.compare_set(_STOP_LATEST_KEY, latest, str(want)))
            if client.add(_STOP_HEARD_KEY, 1) == self.world_size:
                client.set(_STOP_AT_KEY, client.get(_STOP_LATEST_KEY))
            client.wait([_STOP_AT_KEY], _NOTICE_WAIT)
            self.stop_at = int(client.get(_STOP_AT_KEY))
        except Exception:
            pass  # closed, or the store is gone: a stop cuts
        finally:
            self.client = None
            self.settled.set()

    def propose(self, wait):
        """Give notice that the ranks stop; False if the store does not answer within wait.

        The notice is given on a thread of its own: the store is rank 0's
        process, which may be stopped (SIGSTOP) or frozen with its node,
        and c10d's set then waits with no end. The cut that follows shuts
        its connection, which ends the thread.
        """
        answered = []

        def ask():
            try:
                self.proposer.set(_STOP_NOTICE_KEY, "1")
                answered.append(True)
            except Exception:
                pass

        asking = threading.Thread(target=ask, name="elastic-propose", daemon=True)
        asking.start()
        asking.join(wait)
        return bool(answered)

    def close(self):
        """End the waiting thread: its connection is shut; and let both stores go.

        It is waited for: a thread inside the store's wait when the
        interpreter exits aborts the process. A store kept after its
        connections were shut costs a core: torch 1.13's TCPStore client
        has a second connection, for its callbacks, whose thread polls it
        (TCPStoreWorkerDaemon) and, once it is shut, wakes at once for
        ever; the store's destructor ends that thread.
        """
        for fd, link in self.fds.items():
            # Not the store's own side of a connection, which rank 0's
            # process holds too: its server would poll it shut, at once,
            # for as long as it serves.
            _shutdown(fd, link, self.port)
        self.thread.join(_CONNECT_TIMEOUT.total_seconds())
        self.proposer = None
        self.client = None


# The key under which a generation's store says whose it is.
_GENERATION_KEY = "elastic/generation"
# How long a rank's store client tries to connect, and then waits in the
# store (c10d's default): the rendezvous waits for every rank, a started
# spare still in its start-up too.
_CONNECT_TIMEOUT = datetime.timedelta(seconds=1)
_STORE_TIMEOUT = datetime.timedelta(seconds=300)
# How long the stop's thread waits for the notice: the generation's life.
_NOTICE_WAIT = datetime.timedelta(days=365)


def _store(dist, addr, port, world_size, is_master, kw):
    """A TCPStore; the master's bind is retried while the last generation's lets its port go."""
    deadline = time.monotonic() + 10
    while True:
        try:
            if is_master:
                return dist.TCPStore(addr, port, world_size, True, wait_for_workers=False, **kw)
            return dist.TCPStore(addr, port, world_size, False, **kw)
        except RuntimeError as e:
            if not is_master or time.monotonic() > deadline or "ddress already in use" not in str(e):
                raise
            time.sleep(0.05)


def _await_master(addr, port, cut=lambda: False):
    """Wait, looking every 5 ms, until rank 0's store accepts; False once cut.

    c10d's client sleeps a whole second after its first connection is
    refused, and goes on trying for its whole timeout, which no cut ends:
    rank 0 forms its store at the same moment as the others ask for it,
    and a rank 0 lost before it does ends the generation.
    """
    while not cut():
        try:
            socket.create_connection((addr, port), timeout=0.1).close()
            return True
        except OSError:
            time.sleep(0.005)
    return False


def _sockets():
    """The descriptors of this process that are sockets, each with its socket's name (socket:[inode])."""
    out = {}
    for name in os.listdir("/proc/self/fd"):
        try:
            link = os.readlink("/proc/self/fd/" + name)
            if link.startswith("socket:"):
                out[int(name)] = link
        except (OSError, ValueError):
            pass
    return out


def _new_sockets(before):
    """The sockets there are now that were not in before (a _sockets())."""
    return {fd: link for fd, link in _sockets().items() if before.get(fd) != link}


def _text(value):
    """A store's value as text: c10d gives bytes."""
    return value.decode() if isinstance(value, bytes) else value


def _shutdown(fd, link, store_port, store_clients_too=True):
    """Shut a connected socket down, but a listening one or the store's server side (its daemon would abort).

    store_clients_too=False spares the store's client connections too.

    Only the socket seen then: gloo closes a connection its peer closed,
    and its descriptor may hold another socket since.
    """
    try:
        s = socket.socket(fileno=os.dup(fd))
    except OSError:
        return
    try:
        if os.readlink("/proc/self/fd/%d" % s.fileno()) != link:
            s.close()
            return
    except OSError:
        s.close()
        return
    try:
        if s.family not in (socket.AF_INET, socket.AF_INET6) or s.getsockopt(socket.SOL_SOCKET, socket.SO_ACCEPTCONN):
            return
        local = s.getsockname()
        if isinstance(local, tuple) and len(local) >= 2 and local[1] == store_port:
            return
        if not store_clients_too:
            peer = s.getpeername()
            if isinstance(peer, tuple) and len(peer) >= 2 and peer[1] == store_port:
                return
        s.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    finally:
        s.close()


def _agree(gen, state, load):
    """Every rank holds the freshest state; gen.step is its step."""
    import torch
    import torch.distributed as dist

    held = gen._state_step() if gen.in_place else None
    # A survivor of the last generation holds the freshest state there is;
    # any other process may hold none, or one that a generation it was
    # not in trained past: the memory copy of the job's saves may be
    # fresher.
    current = gen.in_place and gen._trained_in is not None and gen._trained_in >= gen.generation - 1
    if not current and state:
        saved = load()
        if isinstance(saved, dict) and isinstance(saved.get("step"), int) and all(k in saved for k in state):
            if held is None or saved["step"] + 1 > held:
                for k, obj in state.items():
                    obj.load_state_dict(saved[k])
                held = saved["step"] + 1
    steps = [torch.zeros(1, dtype=torch.int64) for _ in range(gen.world_size)]
    dist.all_gather(steps, torch.tensor([-1 if held is None else held], dtype=torch.int64))
    steps = [int(t.item()) for t in steps]
    best = max(steps)
    if best < 0:
        gen.step = 0
        return
    if state and any(s != best for s in steps):
        src = steps.index(best)
        box = [{k: obj.state_dict() for k, obj in state.items()} if gen.rank == src else None]
        dist.broadcast_object_list(box, src=src)
        if held != best:
            for k, obj in state.items():
                obj.load_state_dict(box[0][k])
    gen.step = best


def run(train, state=None, backend="gloo", timeout=None, path=None):
    """Call train(gen) once per generation, in this process; return what it returns once it does.

    state: a dict of objects with state_dict()/load_state_dict() (the
    model, the optimizer) that every rank must hold alike. backend: the
    process group's. timeout: its collectives' and store's, in seconds
    (torch's default if None). path: the checkpoint file the script's
    saves name (elastic.save(state, path)), which a process holding no
    fresher state loads too, with the sidecars' memory copies: the copy
    that is left when every sidecar that held one is gone.
    """
    from . import checkpoint as elastic

    def load():
        return elastic.load(path)

    env = os.environ
    gen = Generation(env, in_place=False)
    spare = env.get(SPARE_ENV) == "1"
    link = _connect(0 if spare else gen.generation, spare)
    if link is None and not os.environ.get(FENCE_SOCKET_ENV):
        return _once(train, gen, state, backend, timeout, load)
    if spare:
        # A started spare: its start-up is done; it waits, holding no
        # rank, until a start makes it one.
        if link is None:
            sys.exit(1)
        gen = _next_generation(link, in_place=False, held=None)
        gen.spare = True
    _freeze_start_up()
    while True:
        gen._link = link
        group = None
        try:
            group = _Group(gen, backend, timeout)
            gen._group = group
            if link is not None:
                link.on_leave = group.leave
                if link.leaving.is_set():
                    group.cut()
            group.form()
            _agree(gen, state, load)
            gen._mark(gen.step)
            gen._trained_in = gen.generation
            result = train(gen)
            if link is None or not link.leaving.is_set():
                group.end_stopper()
                return result
        except BaseException as e:
            gen._step_began = None  # not stepping: a leave from now on cuts
            if link is None or not _generation_ended(link, e):
                if group is not None:
                    group.end_stopper()
                raise
        finally:
            if link is not None:
                link.on_leave = None
        # The generation is over: leave it, and wait for the next. Ranks
        # that stopped together shut their connections to each other and
        # destroy the group after the leave, off the path of the next
        # generation. A group that was cut is destroyed first, as a rank
        # whose peer was lost in a collective may wait in gloo's destructor
        # (a send interrupted half-way): such a rank must not say it left,
        # and is killed at the stop's grace period.
        together = group is not None and group.together and not group.cut_done
        if together:
            group.disconnect()
        elif group is not None:
            group.destroy()
        _settle_saves(elastic)
        held, trained_in = gen._state_step(), gen._trained_in
        # A rank may stop, with the others, before its own guard asks it to
        # leave; it leaves only once asked (or once the guard is gone).
        link.leaving.wait()
        link.left()
        if together:
            group.destroy()
        # What still holds the group (a DDP wrapper whose hooks sit on the
        # model's parameters, rank 0's store and its port) is collected
        # before the next generation forms, while the node's ack and the
        # next generation's commit are under way.
        gen._group = group = None
        gc.collect()
        gc.freeze()  # what this generation kept is not scanned again
        gen = _next_generation(link, in_place=True, held=held)
        gen._trained_in = trained_in


def _freeze_start_up():
    """Leave what the start-up made out of every later collection (gc.freeze).

    Each generation's end collects the last group's cycles before the
    next forms (run()): with torch imported, a full collection scans some
    hundred thousand objects, 15 ms on an idle core and several times that
    while the other ranks of the node collect too, on the path of every
    re-formation. Frozen, the start-up's objects (modules, the model, the
    data) are never scanned again; collected first, so that nothing
    frozen is garbage already. Each generation's end freezes what it
    keeps in the same way.
    """
    gc.collect()
    gc.freeze()


def _next_generation(link, in_place, held):
    """Wait, holding no rank, for the guard's next run message, and take its environment."""
    from . import checkpoint as elastic

    m = link.next_run()
    if m is None:
        print("[elastic] the guard is gone: this process stops", file=sys.stderr)
        sys.exit(1)
    _apply_env(m.get("env") or [])
    gen = Generation(os.environ, in_place=in_place)
    gen._held, gen._at_yield = held, _optimizer_steps()
    elastic._new_generation()
    return gen


def _once(train, gen, state, backend, timeout, load):
    """Outside a sidecar: train once, as a plain script, in a group of the world the environment gives (one by default)."""
    group = _Group(gen, backend, timeout)
    try:
        group.form()
        _agree(gen, state, load)
        gen._mark(gen.step)
        return train(gen)
    finally:
        group.destroy()


def _generation_ended(link, e):
    """Whether exception e is the generation's end: the guard asked to leave, now or within the wait."""
    if isinstance(e, GenerationOver) or link.leaving.is_set():
        return True
    if not isinstance(e, (RuntimeError, OSError)):  # c10d's errors: TimeoutError is an OSError
        return False
    try:
        wait = float(os.environ.get(REFORM_WAIT_ENV, "10"))
    except ValueError:
        wait = 10.0
    return link.leaving.wait(wait) and not link.closed


def _resumed(step):
    progress = sys.modules.get("elastic.progress")
    if progress is not None:
        progress.resumed(step)


def _apply_env(env):
    pairs = {}
    for kv in env:
        k, sep, v = kv.partition("=")
        if sep:
            pairs[k] = v
    os.environ.clear()
    os.environ.update(pairs)


def _settle_saves(elastic):
    try:
        elastic._settle()
    except Exception:
        pass
