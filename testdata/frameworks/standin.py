"""What the framework stand-ins share: writing down what a process was
given, and failing as a framework fails, in one line on standard error."""

import json
import os
import socket
import sys
import time


def fail(message, code=1):
    print(message, file=sys.stderr, flush=True)
    sys.exit(code)


def record(kind, **extra):
    """Writes this process's environment and extra to $STANDIN_DIR, whole
    or not at all, one file a process and generation."""
    d = os.environ.get("STANDIN_DIR")
    if not d:
        return
    name = "%s-%s-gen%s-pid%d.json" % (kind, os.environ.get("ELASTIC_ROLE", "x"),
                                       os.environ.get("ELASTIC_GENERATION", "0"), os.getpid())
    tmp = os.path.join(d, "." + name)
    with open(tmp, "w") as f:
        json.dump({"env": dict(os.environ), "pid": os.getpid(), **extra}, f)
    os.rename(tmp, os.path.join(d, name))


def train():
    """The training: steps until STANDIN_SECONDS have passed."""
    end = time.time() + float(os.environ.get("STANDIN_SECONDS", "600"))
    while time.time() < end:
        time.sleep(0.05)


def listen(host, port):
    s = socket.socket(socket.AF_INET6 if ":" in host else socket.AF_INET)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    s.bind((host, port))
    s.listen(64)
    return s


def connect(host, port, timeout):
    """Connects, trying again until timeout seconds have passed."""
    end = time.time() + timeout
    while True:
        try:
            return socket.create_connection((host, port), timeout=5)
        except OSError:
            if time.time() > end:
                raise
            time.sleep(0.1)


def send(sock, obj):
    sock.sendall((json.dumps(obj) + "\n").encode())


def receive(f):
    line = f.readline()
    if not line:
        raise EOFError("connection closed")
    return json.loads(line)
