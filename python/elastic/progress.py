"""The trainer's side of the progress page (hang detection).

The node's guard gives each training process it starts a page of shared
memory, a 4096-byte memfd, as the descriptor named by ELASTIC_PROGRESS_FD
(3 for a cold start, 5 for a warm interpreter). attach() maps it; from then
on the process counts its progress there, and the guard reads it to tell a
rank that hangs from one that works:

    off  field            written by this module
    0    magic            b"ELPROG1\\0" (the guard's)
    8    generation       (the guard's)
    16   steps            count of progress events
    24   last_step_ns     CLOCK_MONOTONIC of the last progress event
    32   last_activity_ns CLOCK_MONOTONIC of the last sign of life
    40   user_step        the step number the trainer last named; 0 = none
    48   quiet_until_ns   end of a declared long phase; 0 = none
    56   dump             pid | signal << 32: the signal that writes the stacks
    64   attached pid     the process that mapped the page
    72   first_step_ns    CLOCK_MONOTONIC of the first progress event
    80   first_user_step  the first step number the trainer named; 0 = none
    88   first_user_ns    CLOCK_MONOTONIC of the event that named it
    96   halt             (the guard's) non-zero once the generation stops

A progress event is an optimizer step of torch (every optimizer, the user's
own subclasses too), elastic.beat() and elastic.save(). Its step is the one
the trainer named (a beat's, a save's state["step"]) or, once it named one
or resumed from one (elastic.load), the steps it made since counted on from
there: the job's step, on every rank. A sign of life is a
progress event or the start of a backward pass (torch.autograd.backward), so
that of a job's ranks the one that stopped (in its forward pass, its data
loader, ...) is the one whose last sign of life is oldest, and its peers,
waiting for it in the collectives of their backward pass, are not. An event
costs no system call: time.monotonic_ns() reads the clock in the vDSO, and
three stores write its words.

Each word is written whole, through a memoryview of 64-bit words: one
8-byte store, so the guard, reading concurrently, sees the old value or the
new one. struct.pack_into zero-fills its span before it writes the bytes
one at a time, and a guard that read a zero there (under CPU contention the
writer can be descheduled in the middle) took a rank stepping every 20 ms
for one silent since its generation began. An event writes its times and
its step's number before its count, and the end of a quiet phase writes
the sign of life before it clears the phase, so that on a CPU that keeps
stores in order (x86-64) the guard, reading in the opposite order, sees
them consistent. Python puts no barrier between the stores, so a CPU that
may reorder them (arm64) can show a count before its time: the guard
waits for the next sample then, and takes a phase's end as a sign of
life itself.

The signal in the dump word (SIGRTMIN+6) makes faulthandler write every
thread's Python stack to standard error, "most recent call first": the
guard sends it to a rank it found hung before it kills it. With it the
guard halts the page: the thread that reaches the next progress event or
sign of life waits there until the kill, so that no rank trains on in a
generation that is over (a stopped rank that the guard continues to write
its stack would otherwise finish what its peers waited for, and every rank
step on until the kill).

torch is never imported here: its hooks go in when the script imports it
(a finder on sys.meta_path waits for torch.autograd and
torch.optim.optimizer), or at once when it is there already (a warm
interpreter that preloaded it).

Standard library only; Python 3.8 and later. The module is private: scripts
use elastic.beat and elastic.quiet.
"""

import os
import sys
import time

FD_ENV = "ELASTIC_PROGRESS_FD"
MAGIC = b"ELPROG1\0"
SIZE = 4096

# Byte offsets of the page's words.
STEPS, LAST_STEP, LAST_ACTIVITY, USER_STEP, QUIET_UNTIL, DUMP, ATTACHED = 16, 24, 32, 40, 48, 56, 64
FIRST_STEP, FIRST_USER_STEP, FIRST_USER_NS, HALT = 72, 80, 88, 96

# The signal that writes the stacks: a real-time one, which nothing in a
# training process uses and whose default action (terminate) is what an
# interpreter that did not register it does.
DUMP_SIGNAL_OFFSET = 6

# The latest CLOCK_MONOTONIC value a word holds: the guard reads them as
# int64.
FOREVER = (1 << 63) - 1

# How many frames a nested optimizer step looks back for the step around it.
_NEST_DEPTH = 16

_mono = time.monotonic_ns

# The page's 64-bit words (a memoryview of the mapping, cast to "Q"); None
# until attach() found one. The mapping itself is kept in _mapping.
_page = None
_mapping = None

# The ends of the quiet phases under way, and what guards them.
_quiet_ends = []
_quiet_lock = None


def attach():
    """Map the page named by ELASTIC_PROGRESS_FD, if there is one; True if the process has a page.

    The variable is removed from the environment either way (a child process
    must not take a descriptor number it never got for the page); the
    descriptor is closed once mapped. A descriptor that is not a 4096-byte
    memfd starting with the magic is left as it is: nothing is written into
    a file of the user's. Never raises.
    """
    global _page, _mapping
    try:
        value = os.environ.pop(FD_ENV, None)
    except Exception:
        return False
    if _page is not None:
        return True
    if value is None:
        return False
    try:
        mapping = _map(int(value))
        if mapping is None:
            return False
        page = _words(mapping)
    except Exception:
        return False
    _mapping, _page = mapping, page
    try:
        _put(page, ATTACHED, os.getpid())
        _register_dump(page)
        _install_hooks()
    except Exception:
        pass
    return True


def attached():
    """Whether this process counts its progress in a page."""
    return _page is not None


def _map(fd):
    """The page at descriptor fd, mapped, and fd closed; None (fd untouched) if fd is not one."""
    import mmap
    import stat

    if fd <= 2:
        return None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_size != SIZE:
        return None
    # A memfd reads as "/memfd:NAME (deleted)".
    if not os.readlink("/proc/self/fd/%d" % fd).startswith("/memfd:"):
        return None
    if os.pread(fd, len(MAGIC), 0) != MAGIC:
        return None
    try:
        # Python 3.13 and later: no descriptor kept for the mapping.
        page = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE, trackfd=False)
    except TypeError:
        # Earlier ones keep a duplicate, close-on-exec: no child inherits it.
        page = mmap.mmap(fd, SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
    if page[:len(MAGIC)] != MAGIC:
        page.close()
        return None
    os.close(fd)
    return page


def _words(mapping):
    """The mapping's 64-bit words, each read and written whole."""
    return memoryview(mapping).cast("Q")


if sys.byteorder == "little":

    def _put(page, offset, value):
        """Write the word at byte offset: one 8-byte store."""
        page[offset >> 3] = value

    def _get(page, offset):
        return page[offset >> 3]

else:
    # The page is little-endian; a big-endian machine swaps, still with
    # one store.

    def _put(page, offset, value):
        page[offset >> 3] = int.from_bytes(value.to_bytes(8, "little"), "big")

    def _get(page, offset):
        return int.from_bytes(page[offset >> 3].to_bytes(8, "big"), "little")


def _register_dump(page):
    """faulthandler writes every thread's stack to stderr on the dump signal; the page says which."""
    import faulthandler

    try:
        import _signal as signal  # signal itself imports enum: milliseconds
    except ImportError:
        import signal
    rtmin = getattr(signal, "SIGRTMIN", None)
    if rtmin is None or sys.stderr is None:
        return
    signum = int(rtmin) + DUMP_SIGNAL_OFFSET
    try:
        sys.stderr.fileno()
        faulthandler.register(signum, file=sys.stderr, all_threads=True, chain=False)
    except Exception:
        return
    _put(page, DUMP, os.getpid() | signum << 32)


# Progress events.


# The job's step, once known: the step the trainer last named (a save's,
# a beat's) or resumed from (elastic.load), and the steps it made since
# without naming one. A rank that names no step of its own (commonly every
# rank but the one that saves) then names the job's steps all the same:
# the step it resumed from, counted on.
_named = None
_since_named = 0
# The optimizer steps this process took: the in-place loop tells by it
# whether a step it was interrupted in had already changed the state.
optimizer_steps = 0


def resumed(step):
    """The trainer resumed from step (an int >= 0): its next step is step + 1."""
    global _named, _since_named
    _named, _since_named = step, 0


def step(user_step=None, advances=True):
    """A progress event; user_step (an int >= 0), if given, is the step number the trainer named.

    An event that names no step names the one after the last named, once
    one was (or resumed from), if it advances (a save is no step of its own).
    """
    global _named, _since_named
    page = _page
    if page is None:
        return
    if _get(page, HALT):
        _park()
    if user_step is not None:
        _named, _since_named = user_step, 0
    elif advances and _named is not None:
        _since_named += 1
        user_step = _named + _since_named
    _named_event(page, user_step)


def _named_event(page, user_step):
    """A progress event naming user_step (None for none)."""
    # The step's number before its count: the guard reads what a count
    # names when it sees the count change.
    t = _mono()
    if user_step is not None:
        _put(page, USER_STEP, user_step)
        if user_step > 0 and _get(page, FIRST_USER_STEP) == 0:
            _put(page, FIRST_USER_NS, t)
            _put(page, FIRST_USER_STEP, user_step)
    _event(page, t)


def activity():
    """A sign of life that is no progress event."""
    page = _page
    if page is not None:
        _put(page, LAST_ACTIVITY, _mono())


def quiet_enter(ns):
    """A long phase of ns nanoseconds starts: the end of the quiet phases under way is the latest; returns its token."""
    global _quiet_lock
    if _page is None:
        return None
    if _quiet_lock is None:
        import _thread

        _quiet_lock = _thread.allocate_lock()
    end = min(_mono() + ns, FOREVER)
    with _quiet_lock:
        _quiet_ends.append(end)
        _put(_page, QUIET_UNTIL, max(_quiet_ends))
    return end


def quiet_exit(token):
    """The phase quiet_enter returned token for is over; the others' latest end stays, 0 if none."""
    page = _page
    if token is None or page is None:
        return
    with _quiet_lock:
        try:
            _quiet_ends.remove(token)
        except ValueError:
            pass
        # The sign of life before the phase's end: a guard that sees the
        # phase over sees it.
        _put(page, LAST_ACTIVITY, _mono())
        _put(page, QUIET_UNTIL, max(_quiet_ends) if _quiet_ends else 0)


# torch's hooks.


def _stepped(frame):
    """An optimizer step ended in frame (torch's wrapper of the class's step).

    The step of a subclass that calls super().step(), or of an optimizer
    that steps another one (ZeroRedundancyOptimizer), passes two wrappers:
    the outer one counts.
    """
    global optimizer_steps
    page = _page
    if page is None:
        return
    if _get(page, HALT):
        _park()
    code = frame.f_code
    f = frame.f_back
    n = 0
    while f is not None and n < _NEST_DEPTH:
        if f.f_code is code:
            return
        f = f.f_back
        n += 1
    optimizer_steps += 1
    step()


def halt_point():
    """Where the calling thread waits for the kill once the guard halted the page (elastic.save, before it stores)."""
    page = _page
    if page is not None and _get(page, HALT):
        _park()


def _park():
    """The guard halted the page: the generation is over. The calling thread waits for the kill, which is a moment away."""
    while True:
        time.sleep(3600)


def _event(page, t=None):
    """Count a progress event at t (now if None) on page, the first one's time too; its time."""
    if t is None:
        t = _mono()
    n = _get(page, STEPS)
    if n == 0:
        _put(page, FIRST_STEP, t)
    _put(page, LAST_STEP, t)
    _put(page, LAST_ACTIVITY, t)
    _put(page, STEPS, n + 1)
    return t


def _post_hook(optimizer, args, kwargs):
    # torch 2: a global step post hook, called by the wrapper of every
    # optimizer class's step.
    _stepped(sys._getframe(1))


def _patch_optimizer(mod):
    register = getattr(mod, "register_optimizer_step_post_hook", None)
    if register is not None:
        register(_post_hook)
        return
    # torch 1.x has no global hooks, but Optimizer.__init__ wraps each
    # class's step (once, _hook_for_profile) in a function that calls
    # self._optimizer_step_code() after the step returns: every optimizer,
    # the user's own classes too. The profiler, which finds that function
    # by its name and reads its self, still does.
    optimizer = getattr(mod, "Optimizer", None)
    inner = getattr(optimizer, "_optimizer_step_code", None)
    if inner is None or getattr(inner, "_elastic_progress", False):
        return

    def _optimizer_step_code(self):
        inner(self)
        _stepped(sys._getframe(1))

    _optimizer_step_code.__doc__ = inner.__doc__
    _optimizer_step_code.__wrapped__ = inner
    _optimizer_step_code._elastic_progress = True
    optimizer._optimizer_step_code = _optimizer_step_code


def _patch_autograd(mod):
    # Tensor.backward calls torch.autograd.backward through the module.
    inner = getattr(mod, "backward", None)
    if inner is None or getattr(inner, "_elastic_progress", False):
        return

    def backward(*args, **kwargs):
        page = _page
        if page is not None:
            if _get(page, HALT):
                _park()
            _put(page, LAST_ACTIVITY, _mono())
        return inner(*args, **kwargs)

    for name in ("__module__", "__name__", "__qualname__", "__doc__"):
        try:
            setattr(backward, name, getattr(inner, name))
        except (AttributeError, TypeError):
            pass
    backward.__wrapped__ = inner
    backward._elastic_progress = True
    mod.backward = backward


_PATCHES = {"torch.autograd": _patch_autograd, "torch.optim.optimizer": _patch_optimizer}
_patched = set()


def _patch(name, mod):
    if name in _patched:
        return
    _patched.add(name)
    try:
        _PATCHES[name](mod)
    except Exception:
        pass


class _Finder:
    """Patches torch's modules once they are executed, without importing them."""

    def __init__(self, names):
        self.names = set(names)

    def find_spec(self, name, path, target=None):
        if name not in self.names:
            return None
        spec = None
        for finder in sys.meta_path:
            if finder is self:
                continue
            find = getattr(finder, "find_spec", None)
            if find is None:
                continue
            spec = find(name, path, target)
            if spec is not None:
                break
        if spec is None or spec.loader is None or isinstance(spec.loader, type):
            return spec
        exec_module = getattr(spec.loader, "exec_module", None)
        if exec_module is None:
            return spec
        finder = self

        def exec_and_patch(module):
            exec_module(module)
            _patch(name, module)
            finder.names.discard(name)
            if not finder.names:
                try:
                    sys.meta_path.remove(finder)
                except ValueError:
                    pass

        try:
            spec.loader.exec_module = exec_and_patch
        except (AttributeError, TypeError):
            pass
        return spec


def _install_hooks():
    waiting = []
    for name in _PATCHES:
        mod = sys.modules.get(name)
        if mod is not None:
            _patch(name, mod)
        else:
            waiting.append(name)
    if waiting:
        sys.meta_path.insert(0, _Finder(waiting))
