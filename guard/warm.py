# The bootstrap of a warm interpreter, run by the guard as
#   PYTHON [the user's interpreter options] -c BOOTSTRAP MODULE...
# It imports the modules, says so with a byte on descriptor 4, waits on
# descriptor 3 for the guard's one "go" message, and becomes the user's
# unchanged command. It starts no thread, keeps no socket open and touches no
# device: all it holds when the command starts is what the imports made, in a
# process that was exec'd, never forked.
# Its command line (ps, pgrep -f) reads as a warm interpreter while it waits,
# and as the user's command once it becomes it.
# Standard library only; Python 3.8 and later.
import sys


def _retitle(title):
    # The kernel shows a process's command line from its arguments' memory,
    # arg_start..arg_end in /proc/self/stat (fields 48 and 49), here this
    # bootstrap's source. The title is written over it in place, as
    # setproctitle(3) does: ended by a NUL, the rest NULs but the last
    # byte, which tells the kernel to read one string up to that NUL.
    # Python copied its arguments at start-up; nothing reads these bytes.
    try:
        import ctypes

        with open("/proc/self/stat", "rb") as f:
            stat = f.read()
        fields = stat[stat.rindex(b")") + 2:].split()
        start, end = int(fields[45]), int(fields[46])
        size = end - start
        data = title.encode("utf-8", "replace")[: size - 2] + b"\0"
        if size < 2 or not data.strip(b"\0"):
            return
        ctypes.memmove(start, data + b"\0" * (size - len(data) - 1) + b" ", size)
    except Exception:
        pass


def _warm():
    import importlib
    import json
    import os

    # sys.argv: -c, sys.path[0] as the command will have it, the modules.
    path0, modules = sys.argv[1], sys.argv[2:]
    del sys.argv[1:]
    interpreter = os.path.basename(getattr(sys, "orig_argv", [sys.executable])[0] or "python")
    _retitle("%s [warm interpreter, preloaded: %s]" % (interpreter, ", ".join(modules)))
    safe_path = getattr(sys.flags, "safe_path", False) or sys.flags.isolated
    if not safe_path and sys.path and sys.path[0] == "" and path0:
        # Imported as the command would import them.
        sys.path[0] = path0
    for name in modules:
        importlib.import_module(name)
    # Descriptor 4: the guard learns that the imports are done (a sidecar
    # that is joining waits for it before it registers the node).
    try:
        os.write(4, b"r")
    except OSError:
        pass
    try:
        os.close(4)
    except OSError:
        pass
    if not safe_path and sys.path and sys.path[0] == path0:
        sys.path[0] = ""  # set again for the command below
    # The PYTHONPATH this interpreter started with: its entries in sys.path
    # are replaced by the generation's.
    started_pythonpath = os.environ.get("PYTHONPATH", "")
    started_dir = os.getcwd()

    chunks = []
    while True:
        chunk = os.read(3, 1 << 16)
        if not chunk:
            break
        chunks.append(chunk)
    os.close(3)
    if not chunks:
        # The guard closed the pipe without a message: not needed.
        os._exit(0)
    msg = json.loads(b"".join(chunks).decode("utf-8"))

    # clear + update, not a new dict: os.environ's methods call putenv, so
    # the C library and child processes see the generation's environment.
    os.environ.clear()
    os.environ.update(msg["env"])
    os.chdir(msg["cwd"])

    def entries(pythonpath, base):
        return [os.path.join(base, p) for p in pythonpath.split(os.pathsep) if p]

    old = entries(started_pythonpath, started_dir)
    new = entries(msg["env"].get("PYTHONPATH", ""), msg["cwd"])
    if old != new and not sys.flags.ignore_environment:
        at = None
        for p in old:
            if p in sys.path:
                i = sys.path.index(p)
                at = i if at is None else min(at, i)
                del sys.path[i]
        if at is None:
            at = 1 if sys.path and sys.path[0] == "" else 0
        sys.path[at:at] = new

    if "ELASTIC_PROGRESS_FD" in os.environ:
        _attach_progress()
    _await_store(msg["env"])
    if msg.get("title"):
        _retitle(msg["title"])
    sys.argv[:] = msg["argv"]
    if "script" in msg:
        _run_script(msg["script"], safe_path)
    elif "module" in msg:
        if not safe_path and sys.path and sys.path[0] == "":
            sys.path[0] = os.getcwd()
        _run_module(msg["module"])
    else:
        _run_code(msg["code"])


def _attach_progress():
    # The generation's progress page (descriptor 5, named by
    # ELASTIC_PROGRESS_FD), mapped by the package elastic's progress
    # module, on the generation's sys.path, as sitecustomize maps it in a
    # cold start, and loaded as sitecustomize loads it: on its own, not
    # through the package's __init__ (which imports torch). The
    # sitecustomize this interpreter ran may be another (the system's),
    # from before the generation's sys.path.
    import os

    try:
        import importlib.util

        mod = sys.modules.get("elastic.progress")
        if mod is None:
            where = importlib.util.find_spec("elastic").submodule_search_locations[0]
            spec = importlib.util.spec_from_file_location("elastic.progress", os.path.join(where, "progress.py"))
            mod = importlib.util.module_from_spec(spec)
            sys.modules["elastic.progress"] = mod
            spec.loader.exec_module(mod)
        mod.attach()
    except Exception:
        half = sys.modules.get("elastic.progress")
        if half is not None and not hasattr(half, "attach"):
            del sys.modules["elastic.progress"]  # its code failed: not a module
    # Not for the command's children, whatever happened.
    os.environ.pop("ELASTIC_PROGRESS_FD", None)


def _await_store(env):
    # Started warm, every rank of a torch.distributed job reaches
    # init_process_group at once, and a rank whose first connection to rank
    # 0's store (MASTER_ADDR:MASTER_PORT) is refused sleeps a whole second
    # before it tries again (c10d's connect retry); started cold, the import
    # of torch hid the race. So a rank other than 0, when torch.distributed
    # was preloaded, first waits until the port accepts, looking every 5 ms,
    # for at most the second torch would have slept.
    if "torch.distributed" not in sys.modules:
        return
    addr, port, rank = env.get("MASTER_ADDR"), env.get("MASTER_PORT"), env.get("RANK")
    if not addr or not port or rank in (None, "", "0"):
        return
    import socket
    import time

    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        try:
            socket.create_connection((addr, int(port)), timeout=0.1).close()
            return
        except (OSError, ValueError):
            time.sleep(0.005)


def _run_script(script, safe_path):
    # As `python script.py` does: __main__ is the script's module for the
    # rest of the process, __file__ is absolute, sys.argv[0] as given, and
    # sys.path[0] the script's directory.
    import io
    import os
    import types

    path = os.path.abspath(script)
    if not safe_path and sys.path and sys.path[0] == "":
        sys.path[0] = os.path.dirname(path)
    if not os.path.isfile(path):
        # A directory or a zip file with a __main__.py.
        import runpy

        runpy.run_path(script, run_name="__main__")
        return
    with io.open_code(path) as f:
        source = f.read()
    code = compile(source, path, "exec", dont_inherit=True)
    main = types.ModuleType("__main__")
    main.__file__ = path
    main.__cached__ = None
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    exec(code, main.__dict__)


def _run_module(name):
    import runpy

    as_main = getattr(runpy, "_run_module_as_main", None)
    if as_main is not None:
        as_main(name, True)  # what `python -m` itself calls
    else:
        runpy.run_module(name, run_name="__main__", alter_sys=True)


def _run_code(source):
    import types

    main = types.ModuleType("__main__")
    main.__builtins__ = __builtins__
    sys.modules["__main__"] = main
    exec(compile(source, "<string>", "exec", dont_inherit=True), main.__dict__)


def _ours(frame):
    g = frame.f_globals
    return g is globals() or g.get("__name__") == "runpy"


try:
    _warm()
except SystemExit:
    raise
except BaseException as e:
    # Shown as a cold interpreter shows it: without this bootstrap's frames.
    tb = e.__traceback__
    while tb is not None and _ours(tb.tb_frame):
        tb = tb.tb_next
    # The hook prints the exception's own traceback, where it has one.
    e.__traceback__ = tb
    sys.excepthook(type(e), e, tb)
    if isinstance(e, KeyboardInterrupt):
        import atexit
        import os
        import signal

        atexit._run_exitfuncs()
        sys.stdout.flush()
        sys.stderr.flush()
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGINT)
    sys.exit(1)
