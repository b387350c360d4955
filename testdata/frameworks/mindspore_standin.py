"""A stand-in for a MindSpore script in dynamic networking: it reads the
variables the way mindspore.communication.init() does and fails the way
it fails. Sources (MindSpore r2.6):
  - mindspore/ccsrc/distributed/cluster/cluster_context.cc: MS_ROLE,
    MS_WORKER_NUM, MS_SCHED_HOST, MS_SCHED_PORT, MS_NODE_ID.
  - .../cluster/topology/meta_server_node.cc: the scheduler takes a
    numeric node id as the rank (ProcessRegister), rejects a taken or
    out-of-range one (CheckRankIdValidation), and otherwise ranks the
    nodes by host and node id compared as strings (ReassignNodeRank).
  - .../rpc/tcp/socket_operation.cc: the scheduler's host is parsed with
    inet_pton only.
The scheduler process runs the same script (msrun's _MetaServerNode),
serves the workers' registration, and exits once they are done.

Where MindSpore would only disagree with the job on ranks (a node id that
is not numeric), the stand-in fails: its get_rank() must be RANK_ID."""

import ipaddress
import os
import socket
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from standin import connect, fail, listen, receive, record, send, train  # noqa: E402

role = os.environ.get("MS_ROLE", "")
if role not in ("MS_SCHED", "MS_WORKER", "MS_PSERVER", "MS_SERVER"):
    fail("Role name '%s' is invalid." % role)
host = os.environ.get("MS_SCHED_HOST", "")
if not host:
    fail("MS_SCHED_HOST is empty. MS_SCHED_HOST")
try:
    port = int(os.environ["MS_SCHED_PORT"])
except (KeyError, ValueError):
    fail("Caught exception of stoi. The environment variable MS_SCHED_PORT is invalid.")
try:
    workers = int(os.environ["MS_WORKER_NUM"])
except (KeyError, ValueError):
    fail("Caught exception of stoi. The environment variable MS_WORKER_NUM is invalid.")
try:
    ipaddress.ip_address(host)
except ValueError:
    fail("Parse ip failed, result: 0, url: %s:%d" % (host, port))
try:
    servers = int(os.environ.get("MS_SERVER_NUM") or "0")
except ValueError:
    fail("Caught exception of stoi. The environment variable MS_SERVER_NUM is invalid.")
topo_timeout = int(os.environ.get("MS_TOPO_TIMEOUT", "1800"))
node_id = os.environ.get("MS_NODE_ID") or str(uuid.uuid4())


def scheduler():
    try:
        server = listen(host, port)
    except OSError as e:
        fail("Failed to call socket listen, url: %s:%d (%s)" % (host, port, e))
    record("mindspore", node_id=node_id)
    server.settimeout(topo_timeout)
    expected = workers + servers
    nodes = {}  # node id: (role, ip, connection, file), every role's in one map
    while len(nodes) < expected:
        try:
            conn, (ip, _) = server.accept()
        except socket.timeout:
            fail("Topology build timed out.")
        f = conn.makefile("r")
        reg = receive(f)
        nid = reg["node_id"]
        if nid in nodes:
            send(conn, {"error": "Repeated registration node: %s to the scheduler." % nid})
            continue
        nodes[nid] = (reg["role"], ip, conn, f)
    ranks = {}
    if all(nid.isdigit() for nid in nodes):
        for nid, (role, _, _, _) in nodes.items():
            r, total = int(nid), workers if role == "MS_WORKER" else servers
            if (role, r) in ranks.values():
                fail("Rank id:%d for role:%s exists." % (r, role))
            if r >= total:
                fail("This node is extra or rank id exceeds. Total node number for role %s is %d but got rank id %d" % (role, total, r))
            ranks[nid] = (role, r)
    else:
        for role in {n[0] for n in nodes.values()}:
            mine = sorted((nid for nid in nodes if nodes[nid][0] == role),
                          key=lambda nid: (socket.inet_pton(socket.AF_INET6 if ":" in nodes[nid][1] else socket.AF_INET, nodes[nid][1]), nid))
            for i, nid in enumerate(mine):
                ranks[nid] = (role, i)
    for nid, (_, _, conn, _) in nodes.items():
        send(conn, {"rank": ranks[nid][1]})
    for _, _, _, f in nodes.values():  # the workers finalize
        try:
            receive(f)
        except (EOFError, OSError):
            pass
    sys.exit(0)


def worker():
    try:
        conn = connect(host, port, topo_timeout)
    except OSError:
        fail("Failed to connect to the meta server node url: %s:%d" % (host, port))
    f = conn.makefile("r")
    send(conn, {"node_id": node_id, "role": role})
    reply = receive(f)
    if "error" in reply:
        fail("Failed to register the compute graph node: %s. Reason: %s" % (node_id, reply["error"]))
    rank = reply["rank"]
    record("mindspore", node_id=node_id, rank=rank)
    if str(rank) != os.environ.get("RANK_ID"):
        fail("get_rank() is %d but RANK_ID is %s: MindSpore's rank is not the job's" % (rank, os.environ.get("RANK_ID")))
    train()
    send(conn, {"done": rank})
    conn.close()


if role == "MS_SCHED":
    scheduler()
else:
    worker()
