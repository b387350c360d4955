"""Checkpoints held in memory by the node's sidecar (elastic training coordinator).

    import elastic

    start = 0
    state = elastic.load("ckpt.pt")   # the newest copy the job has, or None
    if state is not None:
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optimizer"])
        start = state["step"] + 1
    for step in range(start, steps):
        ...
        elastic.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                      "step": step}, "ckpt.pt")
    elastic.flush()

save() copies the state's tensors (torch tensors, numpy arrays) into a buffer
at once, and takes its dicts, lists and tuples apart, so the caller may step
the optimizer or change the state as soon as it returns; the rest (pickling,
sending to the node's sidecar) happens in a background thread. The sidecar keeps the copy
in its memory (it outlives this process), pushes it to another node's sidecar
(it outlives this node) and writes it to `path` at a slower interval. A save
made while an earlier one is still on its way replaces any that waits: the
newest wins. The error of a save (FencedError: this process's generation is
over; TooLargeError: the state does not fit the node's checkpoint memory) is
raised by the next save() or by flush(). A FencedError that nothing catches
in a process of a generation is that generation's end, which its sidecar
is stopping: it ends the process (exit code 1, as any uncaught exception)
with one line, not a traceback:

    [elastic] rank 0: generation 3 is over (this node runs none): the save of step 1234 was not stored; this process is stopping

A save with a `path` does not wait long on a sidecar that does not answer
(frozen, or its socket gone): when the sidecar takes more than a second to
answer, or to take the next part of the payload, this process writes the
copy to `path` itself, renamed into place through the fence
(fenced_replace), and writes later saves there directly, the newest first,
until the sidecar answers again. The fence is the process's fence watchdog, which answers until the
node's deadline even while the sidecar and the guard are frozen: a freeze of
the supervisors costs the saves of the last moment before the trainer is
killed, not those since the freeze. A save without a path has nowhere else
to go: it waits for the sidecar, however long, as it always did.

load() returns the newest complete copy among this node's sidecar, the other
sidecars of the job, and the file at `path`, by (generation, sequence): a
file this process wrote is newer than what the sidecars held of it, and no
sidecar writes an older copy over a newer file. A file an earlier life of
the job left (the job created again, `coordinator run` started again: its
generations count from 1 again) is older than every copy of this life.
Tensors come back on the CPU.

fenced_replace(src, dst) renames src over dst only while this process's
generation is current and its node's deadline is ahead, as `coordinator
commit` does for a shell script: for a script's own checkpoint files.

Outside a sidecar (no ELASTIC_CHECKPOINT_SOCKET) save and load use the file
at `path` alone, so the script runs on its own. The module uses the standard
library only; torch and numpy are used when they are there.

Progress (hang detection). The node's guard counts each rank's progress
events and stops the generation when a rank makes none for far longer than
its steps take. Every optimizer step of torch is an event, with no change to
the script, and so is every save(); a script that steps no torch optimizer,
or one with a phase much longer than its steps, says so:

    for step in range(start, steps):
        ...
        elastic.beat(step=step)        # a progress event; step names it in messages
    with elastic.quiet(600):           # evaluation, a long save: up to 10 minutes
        evaluate(model)

beat(step=None) is a progress event; step, an int >= 0, is the number the
guard's messages give. quiet(seconds) is a context manager: inside it the
rank is not hung until seconds have passed; nested ones keep the later end.
Outside a sidecar both do nothing (quiet still checks its argument).
"""

import atexit
import collections
import ctypes
import io
import json
import math
import numbers
import operator
import os
import pickle
import select
import signal
import socket
import struct
import sys
import threading
import time
import zlib

__all__ = ["save", "load", "flush", "fenced_replace", "beat", "quiet", "CheckpointError", "FencedError", "TooLargeError"]

SOCKET_ENV = "ELASTIC_CHECKPOINT_SOCKET"
# The life of the job this process saves in: its files carry it.
INCARNATION_ENV = "ELASTIC_CHECKPOINT_INCARNATION"
# The fence's sockets (guard/commit.go): the process's fence watchdog's,
# asked first, and its guard's.
WATCHDOG_SOCKET_ENV = "ELASTIC_WATCHDOG_SOCKET"
FENCE_SOCKET_ENV = "ELASTIC_FENCE_SOCKET"

try:
    import torch
except ImportError:  # pragma: no cover - torch is optional
    torch = None
try:
    import numpy
except ImportError:  # pragma: no cover - numpy is optional
    numpy = None
# The progress page; mapped by the interpreter's start (sitecustomize) or
# the warm bootstrap, which load elastic.progress before this package.
from . import progress as _progress


class CheckpointError(RuntimeError):
    """A save or load that failed."""


class FencedError(CheckpointError):
    """This process's generation is over, or its node was fenced out: it can store nothing.

    what says what did not happen: "the save of step 1234 was not stored"
    (the step its state named), "a was not renamed over b"; None when
    unknown.
    """

    what = None


class TooLargeError(CheckpointError):
    """The state does not fit the node's checkpoint memory (--checkpoint-memory)."""


class _Unanswered(CheckpointError):
    """The sidecar did not answer in time, or its socket failed."""


# The frame of the sidecar's socket (memckpt/frame.go).
_HEADER = struct.Struct("<4sB3xIQ")
_MAGIC = b"EMC1"
_OP_SAVE, _OP_LOAD, _OP_READY, _OP_REPLY, _OP_PING = 1, 2, 7, 8, 9
# How long the sidecar may take to answer a save with a path, or to take the
# next part of its payload, before this process writes it to the path
# itself; and how often a sidecar that did not answer is asked again.
_SIDECAR_BOUND = 1.0
# The file on disk (memckpt/diskfile.go).
_FILE_MAGIC = b"ELCKPT01"
# The payload: magic, skeleton length, pickled skeleton, padding, tensor bytes.
_PAYLOAD = struct.Struct("<4sI")
_PAYLOAD_MAGIC = b"EPY1"
_ALIGN = 64


def _first_int(*names):
    """The first of the variables names that is set, as an int; 0 if none."""
    for name in names:
        if os.environ.get(name, "") != "":
            return _env_int(name)
    return 0


def _env_int(name, default=0):
    try:
        return int(os.environ.get(name, default))
    except ValueError:
        return default


def _aligned(n):
    return (n + _ALIGN - 1) // _ALIGN * _ALIGN


class _Pickler(pickle.Pickler):
    """Pickles the state's skeleton: each tensor becomes a reference to its bytes."""

    def __init__(self, f, arrays):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)
        self.arrays = arrays  # [(kind, obj, offset, nbytes)]
        self.refs = []  # each array's reference: the buffer's layout
        self.total = 0

    def persistent_id(self, obj):
        if torch is not None and isinstance(obj, torch.Tensor):
            if obj.layout != torch.strided or obj.is_quantized:
                return None
            n = obj.numel() * obj.element_size()
            ref = ("torch", str(obj.dtype).rsplit(".", 1)[-1], tuple(obj.shape), self.total, n)
        elif numpy is not None and type(obj) is numpy.ndarray and not obj.dtype.hasobject:
            n = obj.nbytes
            ref = ("numpy", obj.dtype.str, tuple(obj.shape), self.total, n)
        else:
            return None
        self.arrays.append((ref[0], obj, self.total, n))
        self.refs.append(ref)
        self.total += _aligned(n)
        return ref


class _Buffer:
    """Memory the tensors are copied into, reused from save to save.

    It keeps the views of its last layout: a training loop saves the same
    tensors save after save, and making a view costs more than copying a
    small tensor.
    """

    def __init__(self, size):
        self.size = size
        self.refs = None
        self.views = None
        if torch is not None:
            self.tensor = torch.empty(max(size, 1), dtype=torch.uint8)
            self.address = self.tensor.data_ptr()
        else:
            self.tensor = bytearray(max(size, 1))
            self.address = ctypes.addressof(ctypes.c_char.from_buffer(self.tensor))

    def view(self, n):
        """A memoryview of the first n bytes, with no copy."""
        return memoryview((ctypes.c_char * max(n, 1)).from_address(self.address)).cast("B")[:n]


def _view(buf, kind, obj, off, n):
    if n == 0:
        return None
    if kind == "torch":
        return buf.tensor[off:off + n].view(obj.dtype).view(obj.shape)
    return numpy.frombuffer(buf.view(off + n), dtype=obj.dtype, count=obj.size, offset=off).reshape(obj.shape)


def _copy_in(arrays, refs, buf):
    if buf.refs != refs:
        buf.views = [_view(buf, kind, obj, off, n) for kind, obj, off, n in arrays]
        buf.refs = refs
    if torch is not None:
        with torch.no_grad():
            _copy_views(arrays, buf.views)
    else:
        _copy_views(arrays, buf.views)


def _copy_views(arrays, views):
    for (kind, obj, _, _), dst in zip(arrays, views):
        if dst is None:
            continue
        if kind == "torch":
            dst.copy_(obj)
        else:
            dst[...] = obj


class _Snapshot:
    """One save: its skeleton, its tensors' bytes in a buffer, and where it goes.

    The skeleton is pickled when first needed, in the sending thread, where
    the state was taken apart into copies the caller cannot change.
    """

    def __init__(self, prefix, buf, total, seq, path, skeleton=None):
        self._prefix, self.buf, self.total, self.seq, self.path = prefix, buf, total, seq, path
        self.skeleton = skeleton
        self.step = None  # the step the state named, for messages

    @property
    def prefix(self):
        if self._prefix is None:
            self._prefix, _ = _prefix_of(self.skeleton, _RefPickler)
            self.skeleton = None
        return self._prefix

    @property
    def size(self):
        return len(self.prefix) + self.total

    def chunks(self):
        return [self.prefix, self.buf.view(self.total)]


def _prefix_of(skeleton, pickler, *args):
    """The payload's head: magic, length, the pickled skeleton, padding."""
    f = io.BytesIO()
    f.write(b"\0" * _PAYLOAD.size)
    p = pickler(f, *args)
    p.dump(skeleton)
    skel_len = f.tell() - _PAYLOAD.size
    f.write(b"\0" * (_aligned(f.tell()) - f.tell()))
    prefix = bytearray(f.getbuffer())
    _PAYLOAD.pack_into(prefix, 0, _PAYLOAD_MAGIC, skel_len)
    return bytes(prefix), p


# What the fast capture keeps as it is: immutable.
_ATOMS = frozenset([int, float, bool, str, bytes, complex, type(None)])


class _Ref:
    """A tensor's place in the skeleton: its reference in the payload."""

    __slots__ = ("ref",)

    def __init__(self, ref):
        self.ref = ref


class _RefPickler(pickle.Pickler):
    """Pickles a skeleton the walker made: each _Ref becomes its reference."""

    def __init__(self, f):
        super().__init__(f, protocol=pickle.HIGHEST_PROTOCOL)

    def persistent_id(self, obj):
        return obj.ref if type(obj) is _Ref else None


class _Slow(Exception):
    """The state holds something the walker does not take apart."""


class _Walker:
    """Takes a state of dicts, lists, tuples, tensors and immutable values
    apart: a skeleton of fresh containers, tensors replaced by _Ref, which the
    caller cannot change any more, and the arrays to copy. Cheaper than
    pickling, which can then happen in the background.
    """

    def __init__(self):
        self.arrays = []
        self.refs = []
        self.total = 0
        self.memo = {}  # id -> (its skeleton, the object, kept alive)

    def array(self, kind, obj, dtype, shape, n):
        ref = (kind, dtype, shape, self.total, n)
        self.arrays.append((kind, obj, self.total, n))
        self.refs.append(ref)
        self.total += _aligned(n)
        return _Ref(ref)

    def walk(self, obj):
        t = type(obj)
        if t in _ATOMS:
            return obj
        seen = self.memo.get(id(obj))
        if seen is not None:
            return seen[0]
        if t is dict or t is collections.OrderedDict:
            out = t()
            self.memo[id(obj)] = (out, obj)
            for k, v in obj.items():
                if type(k) not in _ATOMS:
                    raise _Slow
                out[k] = self.walk(v)
            # An OrderedDict's attributes: a state_dict's _metadata.
            for k, v in getattr(obj, "__dict__", {}).items():
                setattr(out, k, self.walk(v))
            return out
        if t is list:
            out = []
            self.memo[id(obj)] = (out, obj)
            for v in obj:
                out.append(self.walk(v))
            return out
        if t is tuple:
            out = tuple([self.walk(v) for v in obj])
        elif torch is not None and isinstance(obj, torch.Tensor):
            if obj.layout != torch.strided or obj.is_quantized:
                raise _Slow
            out = self.array("torch", obj, str(obj.dtype).rsplit(".", 1)[-1], tuple(obj.shape),
                             obj.numel() * obj.element_size())
        elif numpy is not None and t is numpy.ndarray and not obj.dtype.hasobject:
            out = self.array("numpy", obj, obj.dtype.str, tuple(obj.shape), obj.nbytes)
        else:
            raise _Slow
        self.memo[id(obj)] = (out, obj)
        return out


def _capture(state, buf, seq, path):
    """The synchronous part of save: take the state apart, copy the tensors.

    A state of dicts, lists, tuples, tensors and immutable values is taken
    apart by the walker and pickled later; any other is pickled now.
    """
    w = _Walker()
    try:
        skeleton, prefix = w.walk(state), None
    except (_Slow, RecursionError):
        skeleton, (prefix, w) = None, _prefix_of(state, _Pickler, [])
    if buf is None or buf.size < w.total:
        buf = _Buffer(w.total)
    _copy_in(w.arrays, w.refs, buf)
    return _Snapshot(prefix, buf, w.total, seq, path, skeleton)


def _decode(body):
    """The state of a payload; tensors share the payload's memory."""
    magic, skel_len = _PAYLOAD.unpack_from(body, 0)
    if magic != _PAYLOAD_MAGIC:
        raise CheckpointError("not a checkpoint written by elastic.save")
    start = _PAYLOAD.size
    base = _aligned(start + skel_len)

    class _Unpickler(pickle.Unpickler):
        def persistent_load(self, ref):
            kind, dtype, shape, off, n = ref
            if kind == "torch":
                if torch is None:
                    raise CheckpointError("the checkpoint holds torch tensors: import torch")
                dt = getattr(torch, dtype)
                if n == 0:
                    return torch.empty(shape, dtype=dt)
                return torch.frombuffer(body, dtype=dt, count=n // torch.empty((), dtype=dt).element_size(),
                                        offset=base + off).view(shape)
            if numpy is None:
                raise CheckpointError("the checkpoint holds numpy arrays: import numpy")
            dt = numpy.dtype(dtype)
            count = n // dt.itemsize if dt.itemsize else 0
            return numpy.frombuffer(body, dtype=dt, count=count, offset=base + off).reshape(shape)

    return _Unpickler(io.BytesIO(memoryview(body)[start:start + skel_len])).load()


def _newer_file(fmeta, meta):
    """Whether the file's copy (fmeta) is newer than the sidecar's (meta).

    Generations order the copies of one life of the job only: a job
    created again, or `coordinator run` started again, counts from 1 again,
    and a file its earlier life left (generation 9, say) is older than
    anything this life saved, which began from it or from nothing.
    """
    if fmeta.get("incarnation", "") != meta.get("incarnation", ""):
        return False
    return _order(fmeta) > _order(meta)


def _order(meta):
    """What orders copies, as the sidecar does (memckpt.Meta.Newer)."""
    return (meta.get("generation", 0), meta.get("seq", 0), -meta.get("rank", 0), _Inverse(meta.get("node", "")))


class _Inverse(str):
    """A string that sorts backwards: the lower node wins a tie."""

    def __lt__(self, other):
        return str.__gt__(self, other)

    def __gt__(self, other):
        return str.__lt__(self, other)


def _read_exact(sock, n):
    out = bytearray(n)
    view = memoryview(out)
    got = 0
    while got < n:
        k = sock.recv_into(view[got:], n - got)
        if k == 0:
            raise _Unanswered("the sidecar hung up")
        got += k
    return out


def _read_frame(sock):
    magic, op, meta_len, body_len = _HEADER.unpack(_read_exact(sock, _HEADER.size))
    if magic != _MAGIC:
        raise CheckpointError("the sidecar spoke another protocol")
    meta = json.loads(bytes(_read_exact(sock, meta_len))) if meta_len else {}
    return op, meta, body_len


def _refusal(reply):
    kind = reply.get("kind")
    cls = FencedError if kind == "fenced" else TooLargeError if kind == "too_large" else CheckpointError
    return cls(reply.get("error", "the sidecar refused"))


def _address(name):
    """The address of a socket named as the sidecar names them: '@name' is abstract."""
    return "\0" + name[1:] if name.startswith("@") else name


def _set_bound(sock, seconds):
    """Bounds each wait of sock's sends, receives and connect (0: none).

    The kernel's own timeouts (SO_SNDTIMEO, SO_RCVTIMEO): a blocking call
    that makes no progress for that long fails with EAGAIN, and no call
    makes a system call more than it did without them.
    """
    tv = struct.pack("@ll", int(seconds), int(seconds % 1 * 1e6))
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, tv)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, tv)


def _connect(name, bound=0):
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(None)  # blocking, whatever socket.setdefaulttimeout says
        if bound:
            _set_bound(sock, bound)
        sock.connect(_address(name))
    except OSError as e:
        sock.close()
        raise _Unanswered("the sidecar's checkpoint store at %s is unreachable: %s" % (name, e)) from None
    return sock


def _write_file(path, meta, chunks, commit=os.replace):
    """Writes a copy to path atomically, as the sidecar does: to a file
    beside it, synced, then renamed over it by commit(tmp, path)."""
    crc = 0
    for c in chunks:
        crc = zlib.crc32(c, crc)
    meta = dict(meta, size=sum(len(c) for c in chunks), crc32=crc)
    head = json.dumps(meta).encode()
    d = os.path.dirname(path) or "."
    os.makedirs(d, exist_ok=True)
    tmp = os.path.join(d, ".%s.tmp-%d" % (os.path.basename(path), os.getpid()))
    try:
        with open(tmp, "wb") as f:
            f.write(_FILE_MAGIC + struct.pack("<I", len(head)) + head)
            for c in chunks:
                f.write(c)
            f.flush()
            os.fsync(f.fileno())
        commit(tmp, path)
    except BaseException:
        try:
            os.remove(tmp)
        except OSError:
            pass
        raise


def fenced_replace(src, dst):
    """Rename src over dst, but only while this process's generation is
    current and its node holds its lease, before its deadline.

    Under a sidecar the process's fence watchdog does the rename, or its
    guard when the watchdog cannot be reached; the watchdog answers even
    while the sidecar and the guard are frozen, until the deadline. A
    refusal (the generation is over, the node fenced out, the deadline
    passed) raises FencedError and renames nothing, so a process that will
    be killed never writes over the next generation's files. Outside a
    sidecar (no ELASTIC_FENCE_SOCKET) it is os.replace.
    """
    try:
        _fenced_rename(_env_int("ELASTIC_GENERATION"), src, dst)
    except FencedError as e:
        e.what = "%s was not renamed over %s" % (src, dst)
        raise


def _fenced_rename(generation, src, dst):
    """fenced_replace for a process of generation (guard.Fence.Commit)."""
    guard = os.environ.get(FENCE_SOCKET_ENV, "")
    if not guard:
        os.replace(src, dst)
        return
    line = (json.dumps({"op": "rename", "generation": generation, "src": os.path.abspath(src),
                        "dst": os.path.abspath(dst)}) + "\n").encode()
    watchdog = os.environ.get(WATCHDOG_SOCKET_ENV, "")
    if watchdog:
        sock = _dial_fence(watchdog)
        if sock is not None:
            # The watchdog's answer stands; without one there, the guard's.
            _fence_exchange(sock, line, "the fence watchdog")
            return
    sock = _dial_fence(guard)
    if sock is None:
        raise CheckpointError("the guard's fence at %s is unreachable" % guard)
    _fence_exchange(sock, line, "the guard")


def _dial_fence(name):
    """A connection to the fence socket name, None if it cannot be reached
    within 30 s (as guard.dialUnix)."""
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.settimeout(30)
        sock.connect(_address(name))
        sock.settimeout(None)
    except OSError:
        sock.close()
        return None
    return sock


def _fence_exchange(sock, line, who):
    """Sends a request line, reads the answer of who and closes sock."""
    with sock:
        write_error = None
        try:
            sock.sendall(line)
        except OSError as e:
            # One that refuses the peer answers at once and closes without
            # reading: read its answer all the same.
            write_error = e
        try:
            reply = sock.makefile("rb").readline()
        except OSError:
            reply = b""
    if not reply.endswith(b"\n"):
        if write_error is not None:
            raise CheckpointError("ask %s: %s" % (who, write_error))
        # Closed without an answer: going away with the node's fence.
        raise FencedError("%s did not answer" % who)
    reply = reply.decode(errors="replace").strip()
    if reply == "ok":
        return
    if reply.startswith("refused: "):
        raise FencedError(reply[len("refused: "):])
    raise CheckpointError(reply[len("error: "):] if reply.startswith("error: ") else reply)


class _Probe:
    """Asks a sidecar that did not take a save whether it answers again,
    without waiting: one ping, looked at (never waited for) at each save,
    and sent again a second after the last when its connection fails."""

    def __init__(self, name, generation):
        self.name = name
        meta = json.dumps({"generation": generation}).encode()
        self.frame = _HEADER.pack(_MAGIC, _OP_PING, len(meta), 0) + meta
        self.sock = None
        self.sent = time.monotonic()
        self.ping()

    def answered(self):
        """Whether the sidecar has answered the ping."""
        if self.sock is None:
            now = time.monotonic()
            if now - self.sent >= _SIDECAR_BOUND:
                self.sent = now
                self.ping()
            return False
        try:
            ready, _, _ = select.select([self.sock], [], [], 0)
            if not ready:
                return False
            if self.sock.recv(1):
                return True
        except OSError:
            pass
        # Closed without an answer: ask again in a while.
        self.close()
        return False

    def ping(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.setblocking(False)
        try:
            sock.connect(_address(self.name))
            sock.send(self.frame)
        except OSError:
            sock.close()
            return
        self.sock = sock

    def close(self):
        if self.sock is not None:
            self.sock.close()
            self.sock = None


def _read_file_meta(path):
    try:
        with open(path, "rb") as f:
            head = f.read(12)
            if len(head) < 12 or head[:8] != _FILE_MAGIC:
                return None, 0
            (n,) = struct.unpack("<I", head[8:12])
            return json.loads(f.read(n)), 12 + n
    except (OSError, ValueError):
        return None, 0


def _read_file(path, meta, offset):
    with open(path, "rb") as f:
        f.seek(offset)
        body = bytearray(meta["size"])
        if f.readinto(body) != len(body) or zlib.crc32(body) != meta.get("crc32"):
            return None
    return body


class _Saver:
    """The process's saves: the newest waits while one is sent."""

    def __init__(self):
        self.cond = threading.Condition()
        self.pending = None
        self.inflight = None
        self.free = []
        self.error = None
        self.seq = 0
        self.thread = None
        self.sock = None
        self.sock_bound = 0  # the bound set on sock: _SIDECAR_BOUND, or 0 for none
        # While the sidecar has not answered: saves with a path go to disk.
        self.probe = None
        self.last = None  # standalone without a path: (meta, body)
        self.socket_name = os.environ.get(SOCKET_ENV, "")
        self.generation = _env_int("ELASTIC_GENERATION")
        # The process's rank under every framework: the project's own, else
        # torchrun's, Paddle's (its launcher's processes) or msrun's.
        self.rank = _first_int("ELASTIC_RANK", "RANK", "PADDLE_TRAINER_ID", "RANK_ID")
        self.job = os.environ.get("ELASTIC_JOB_ID", "")
        self.incarnation = os.environ.get(INCARNATION_ENV, "")

    def raise_error(self):
        if self.error is not None:
            err, self.error = self.error, None
            raise err

    def save(self, state, path):
        with self.cond:
            self.raise_error()
            replaced = self.pending
            self.pending = None
            buf = replaced.buf if replaced is not None else (self.free.pop() if self.free else None)
        try:
            snap = _capture(state, buf, self.seq + 1, os.path.abspath(path) if path else None)
        except BaseException:
            with self.cond:
                if replaced is not None and self.pending is None:
                    self.pending = replaced
                elif buf is not None:
                    self.free.append(buf)
            raise
        self.seq += 1
        snap.step = _state_step(state)
        with self.cond:
            self.pending = snap
            if self.thread is None:
                self.thread = threading.Thread(target=self.run, name="elastic-save", daemon=True)
                self.thread.start()
            self.cond.notify_all()

    def run(self):
        while True:
            with self.cond:
                while self.pending is None:
                    self.cond.wait()
                snap, self.pending, self.inflight = self.pending, None, self.pending
            err = None
            try:
                self.send(snap)
            except CheckpointError as e:
                err = e
                if isinstance(e, FencedError):
                    e.what = "the save %swas not stored" % ("" if snap.step is None else "of step %d " % snap.step)
            except Exception as e:  # an I/O error: say so at the next call
                err = CheckpointError("save failed: %s" % e)
            with self.cond:
                self.inflight = None
                if len(self.free) < 2:
                    self.free.append(snap.buf)
                if err is not None:
                    self.error = err
                self.cond.notify_all()

    def meta(self, snap):
        meta = {"job": self.job, "generation": self.generation, "seq": snap.seq, "rank": self.rank}
        if self.incarnation:
            meta["incarnation"] = self.incarnation
        return meta

    def send(self, snap):
        if not self.socket_name:
            if snap.path:
                _write_file(snap.path, self.meta(snap), snap.chunks())
            else:
                self.last = (dict(self.meta(snap), size=snap.size), bytearray(b"".join(bytes(c) for c in snap.chunks())))
            return
        if not snap.path:
            # Nowhere else to go: wait for the sidecar.
            self.send_sidecar(snap, 0)
            return
        if self.probe is not None:
            if not self.probe.answered():
                self.write_fenced(snap)
                return
            self.probe.close()
            self.probe = None
        try:
            self.send_sidecar(snap, _SIDECAR_BOUND)
        except _Unanswered:
            self.probe = _Probe(self.socket_name, self.generation)
            self.write_fenced(snap)

    def write_fenced(self, snap):
        """Writes snap to its path in this process, renamed into place
        through the fence: the sidecar did not take it."""
        _write_file(snap.path, self.meta(snap), snap.chunks(),
                    lambda tmp, path: _fenced_rename(self.generation, tmp, path))

    def send_sidecar(self, snap, bound):
        """Sends snap to the sidecar; each of its waits bounded by bound
        seconds (0: none). _Unanswered when it does not answer in time or
        its socket fails."""
        if self.sock is not None and self.sock_bound != bound:
            _set_bound(self.sock, bound)
            self.sock_bound = bound
        if self.sock is None:
            self.sock = _connect(self.socket_name, bound)
            self.sock_bound = bound
        try:
            req = {"generation": self.generation, "seq": snap.seq, "rank": self.rank}
            if snap.path:
                req["path"] = snap.path
            meta = json.dumps(req).encode()
            self.sock.sendall(_HEADER.pack(_MAGIC, _OP_SAVE, len(meta), snap.size) + meta)
            op, reply, _ = _read_frame(self.sock)
            if op != _OP_READY:
                raise _refusal(reply)
            for c in snap.chunks():
                self.sock.sendall(c)
            op, reply, _ = _read_frame(self.sock)
            if reply.get("error"):
                raise _refusal(reply)
        except (OSError, _Unanswered) as e:
            # A failed or late exchange leaves the connection in an unknown
            # state: the next save opens another.
            self.sock.close()
            self.sock = None
            if isinstance(e, _Unanswered):
                raise
            if isinstance(e, (BlockingIOError, socket.timeout)):
                raise _Unanswered("the sidecar's checkpoint store did not answer within %gs" % bound) from None
            raise _Unanswered("the sidecar's checkpoint store is unreachable: %s" % e) from None

    def flush(self):
        with self.cond:
            while self.pending is not None or self.inflight is not None:
                self.cond.wait()
            self.raise_error()

    def load_sidecar(self):
        sock = _connect(self.socket_name)
        try:
            sock.sendall(_HEADER.pack(_MAGIC, _OP_LOAD, 0, 0))
            op, reply, body_len = _read_frame(sock)
            if reply.get("error"):
                raise _refusal(reply)
            if not reply.get("found"):
                return None, None
            return reply["meta"], _read_exact(sock, body_len)
        finally:
            sock.close()


# The saver reads the process's environment (its socket, generation and
# rank) when first used, not at import: a warm interpreter (--preload)
# imports this module before its generation's environment exists.
_saver = None
_saver_lock = threading.Lock()


def _the_saver():
    global _saver
    with _saver_lock:
        if _saver is None:
            _saver = _Saver()
            _store_last_save_on_sigterm()
        return _saver


def _store_last_save_on_sigterm():
    """Make SIGTERM store a save still being sent before the process ends.

    The sidecar stops a generation (a restart, a suspension, a pod's
    removal) with SIGTERM, whose default action ends the process at once,
    before atexit: the last save, sent in the background, would be lost.
    Only a process that left SIGTERM at its default gets this, and it still
    ends by SIGTERM; one with a handler of its own keeps it.
    """
    try:
        if threading.current_thread() is threading.main_thread() and signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:
            signal.signal(signal.SIGTERM, _stored_then_terminated)
    except (ValueError, OSError):
        pass


def _stored_then_terminated(signum, frame):
    signal.signal(signum, signal.SIG_DFL)
    _flush_at_exit()
    os.kill(os.getpid(), signum)


def save(state, path=None):
    """Store state (any picklable object; tensors are copied now, sent in the background).

    path, if given, is where the copy is also written on disk, at a slower
    interval; and where this process writes it itself, through the fence,
    when the sidecar does not take it within a second (frozen, or gone),
    until the sidecar answers again. Without a path a save waits for the
    sidecar. Raises the error of an earlier save, if one failed
    (FencedError: the generation is over, or the fence refused the file).
    A save is a progress event; state["step"], an int, names its step.
    """
    if _progress is not None:
        _progress.halt_point()
    _the_saver().save(state, path)
    if _progress is not None:
        _progress.step(_state_step(state), advances=False)


def _state_step(state):
    """state["step"] when it is an int >= 0, else None."""
    if not isinstance(state, dict):
        return None
    n = state.get("step")
    if n is None or isinstance(n, bool):
        return None
    try:
        n = operator.index(n)
    except TypeError:
        return None
    return n if 0 <= n < 1 << 64 else None


def beat(step=None):
    """A progress event: the rank works. step, an int >= 0, names the step in the guard's messages.

    Torch's optimizer steps and save() are events already; beat() is for a
    loop that steps no torch optimizer, or to name the step. Outside a
    sidecar it does nothing.
    """
    if step is not None:
        if isinstance(step, bool):
            raise ValueError("elastic.beat: step must be an int >= 0, not a bool")
        try:
            step = operator.index(step)
        except TypeError:
            raise ValueError("elastic.beat: step must be an int >= 0, not a %s" % type(step).__name__) from None
        if not 0 <= step < 1 << 64:
            raise ValueError("elastic.beat: step must be an int >= 0, not %d" % step)
    if _progress is not None:
        _progress.step(step)


class _Quiet:
    """The context manager quiet() returns."""

    __slots__ = ("_ns", "_tokens")

    def __init__(self, ns):
        self._ns = ns
        self._tokens = []

    def __enter__(self):
        self._tokens.append(_progress.quiet_enter(self._ns) if _progress is not None else None)
        return self

    def __exit__(self, *exc):
        token = self._tokens.pop()
        if _progress is not None:
            _progress.quiet_exit(token)
        return False


def quiet(seconds):
    """with elastic.quiet(seconds): a long phase (evaluation, a slow save) of at most seconds.

    Inside it the rank is not taken for hung, progress events or not,
    until seconds have passed (math.inf: until it ends); its end is a sign
    of life. Nested phases keep the later end. seconds is a number >= 0;
    anything else raises ValueError, inside a sidecar or not.
    """
    if isinstance(seconds, bool) or not isinstance(seconds, numbers.Real):
        raise ValueError("elastic.quiet: seconds must be a number >= 0, not a %s" % type(seconds).__name__)
    s = float(seconds)
    if not s >= 0:  # NaN too
        raise ValueError("elastic.quiet: seconds must be a number >= 0, not %r" % (seconds,))
    return _Quiet(_FOREVER_NS if math.isinf(s) else min(int(s * 1e9), _FOREVER_NS))


# The longest quiet phase: the guard reads its end as an int64.
_FOREVER_NS = (1 << 63) - 1


def flush():
    """Wait until the last save is stored (by the sidecar, or in its file); raise its error if it failed."""
    _the_saver().flush()


def load(path=None):
    """The newest complete copy among the sidecars' memory and the file at path, or None."""
    saver = _the_saver()
    saver.flush()
    meta, body = None, None
    if saver.socket_name:
        meta, body = saver.load_sidecar()
    elif saver.last is not None:
        meta, body = saver.last
    if path:
        fmeta, offset = _read_file_meta(path)
        if fmeta is not None and (meta is None or _newer_file(fmeta, meta)):
            fbody = _read_file(path, fmeta, offset)
            if fbody is not None:
                meta, body = fmeta, fbody
    if body is None:
        return None
    state = _decode(body)
    if _progress is not None:
        n = _state_step(state)
        if n is not None:
            _progress.resumed(n)
    return state


def _settle(wait=5.0):
    """At a generation's end: let the save on its way finish (refused, as the generation is over), and forget its error."""
    s = _saver
    if s is None:
        return
    end = time.monotonic() + wait
    with s.cond:
        s.pending = None
        while s.inflight is not None and time.monotonic() < end:
            s.cond.wait(0.05)
        s.error = None


def _new_generation():
    """The process trains in a new generation, in place: its saves are of that generation, and of its rank."""
    s = _saver
    if s is None:
        return
    with s.cond:
        s.error = None
        s.generation = _env_int("ELASTIC_GENERATION")
        s.rank = _first_int("ELASTIC_RANK", "RANK", "PADDLE_TRAINER_ID", "RANK_ID")
        s.incarnation = os.environ.get(INCARNATION_ENV, "")


@atexit.register
def _flush_at_exit():
    # A script that ends right after its last save still stores it.
    if _saver is not None and _saver.thread is not None:
        try:
            _saver.flush()
        except FencedError as e:
            line = _generation_over(e)
            if line is None:
                print("elastic: the last save was not stored: %s" % e, file=sys.stderr)
            elif not _said_over:
                _say(line)
        except CheckpointError as e:
            print("elastic: the last save was not stored: %s" % e, file=sys.stderr)


# The prefix of the sidecar's refusals (sidecar.ErrFenced).
_FENCED_PREFIX = "sidecar: fenced: "
# Whether the line of the generation's end was said: once is enough.
_said_over = False


def _generation_over(e):
    """The line that says FencedError e ended this process of a generation; None in a process of none.

    The refusal's reason, but for what the line says already.
    """
    saver = _saver
    generation = saver.generation if saver is not None else _env_int("ELASTIC_GENERATION")
    if generation < 1:
        return None
    rank = saver.rank if saver is not None else _first_int("ELASTIC_RANK", "RANK", "PADDLE_TRAINER_ID", "RANK_ID")
    reason = str(e)
    if reason.startswith(_FENCED_PREFIX):
        reason = reason[len(_FENCED_PREFIX):]
    over = "generation %d is over" % generation
    if reason.startswith(over):
        reason = reason[len(over):].lstrip("; ")
    return "[elastic] rank %d: %s%s: %s; this process is stopping" % (
        rank, over, " (%s)" % reason if reason else "", e.what or "nothing more is stored")


def _say(line):
    global _said_over
    _said_over = True
    try:
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
    except Exception:
        pass


def _excepthook(kind, value, tb):
    """A FencedError nothing caught in a generation's process: one line; anything else as before."""
    line = _generation_over(value) if isinstance(value, FencedError) else None
    if line is None:
        _previous_excepthook(kind, value, tb)
        return
    if not _said_over:
        _say(line)


# Installed at import, in a cold interpreter as in a warm one (whose
# bootstrap shows what the command raised through sys.excepthook too).
_previous_excepthook = sys.excepthook
sys.excepthook = _excepthook
