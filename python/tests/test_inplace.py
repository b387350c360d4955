"""elastic.inplace outside a sidecar, and what it does to c10d between generations."""

import json
import os
import subprocess
import sys
import textwrap
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE_DIR = os.path.dirname(HERE)


def run_script(code):
    """Run code in a new interpreter with the package on its path and no sidecar around it."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ELASTIC_", "RANK", "WORLD_SIZE", "MASTER_"))}
    env["PYTHONPATH"] = PACKAGE_DIR
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], env=env, capture_output=True, text=True,
                          timeout=120)


class OutsideASidecar(unittest.TestCase):
    def test_run_trains_once_as_a_plain_script(self):
        out = run_script("""
            import torch, elastic
            model = torch.nn.Linear(2, 1)
            calls = []
            def train(gen):
                calls.append((gen.rank, gen.world_size, gen.step, gen.in_place, gen.spare))
                for step in gen.steps(3):
                    model(torch.ones(2)).sum().backward()
                return "trained"
            print(elastic.run(train, state={"model": model}), calls)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "trained [(0, 1, 0, False, False)]")

    def test_an_exception_in_train_fails_the_script(self):
        out = run_script("""
            import elastic
            def train(gen):
                raise ValueError("the script's own error")
            elastic.run(train)
        """)
        self.assertEqual(out.returncode, 1)
        self.assertIn("ValueError: the script's own error", out.stderr)

    def test_it_resumes_from_the_file_it_saved(self):
        # Outside a sidecar, state comes from elastic.load(): none here, so
        # the loop starts at step 0.
        out = run_script("""
            import torch, elastic
            model = torch.nn.Linear(2, 1)
            elastic.run(lambda gen: print("from", gen.step), state={"model": model})
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "from 0")


class GroupNames(unittest.TestCase):
    def test_the_next_generation_numbers_its_groups_from_0(self):
        # A formation cut half-way leaves c10d's group counter counted; the
        # next generation's rendezvous must use the names a new process does.
        out = run_script("""
            import torch.distributed as dist
            from elastic import inplace
            c10d = dist.distributed_c10d
            if hasattr(c10d, "_group_count"):
                c10d._group_count = 3
            else:
                c10d._world.group_count = 3
            inplace._reset_group_names(dist)
            print(getattr(c10d, "_group_count", None) if hasattr(c10d, "_group_count") else c10d._world.group_count)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "0")


class Generations(unittest.TestCase):
    def test_the_next_generations_rank_0_binds_the_port_again(self):
        # torch 2's DDP imports torch.distributed.nn.functional (through
        # torch._dynamo) inside the first generation; its functions' default
        # group=group.WORLD then kept that generation's group, and its
        # store, alive: rank 0 of the next could not bind its port.
        out = run_script("""
            import os, socket
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
            import torch
            from torch.nn.parallel import DistributedDataParallel as DDP
            from elastic import inplace
            model = torch.nn.Linear(2, 1)
            for g in (1, 2, 3):
                gen = inplace.Generation(dict(ELASTIC_GENERATION=str(g), RANK="0", WORLD_SIZE="1"), in_place=g > 1)
                group = inplace._Group(gen, "gloo", None)
                group.form()
                ddp = DDP(model)
                ddp(torch.ones(2)).sum().backward()
                import torch.distributed.nn.functional  # what torch 2's DDP imports
                del ddp
                group.end_stopper()
                group.destroy()
                print("generation", g, "formed", flush=True)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split("\n")[:3], ["generation 1 formed", "generation 2 formed", "generation 3 formed"])


class Stopper(unittest.TestCase):
    def test_a_closed_stopper_leaves_no_thread_busy(self):
        # torch 1.13's TCPStore client polls a second connection on a thread
        # of its own; shut and kept, it woke at once for ever: every
        # generation left a core's worth of spinning behind in every rank.
        out = run_script("""
            import socket, time
            import torch.distributed as dist
            from elastic import inplace
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            server = dist.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)
            for _ in range(3):
                stopper = inplace._Stopper(dist, "127.0.0.1", port, 2, lambda: None)
                stopper.close()
            time.sleep(0.5)
            t, w = time.process_time(), time.monotonic()
            time.sleep(2)
            print("busy %.2f" % ((time.process_time() - t) / (time.monotonic() - w)))
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        busy = float(out.stdout.split()[-1])
        self.assertLess(busy, 0.2, "the process's threads used %.0f%% of a core with nothing to do" % (busy * 100))


class StopTogether(unittest.TestCase):
    def stop(self, notice_at, ahead_pad):
        """Three ranks in lockstep (a barrier stands for each step's collective), rank 2 with no pad after it."""
        out = run_script("""
            import json, socket, threading, time
            import torch.distributed as dist
            from elastic import inplace
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            server = dist.TCPStore("127.0.0.1", port, 4, True, wait_for_workers=False)
            stoppers = [inplace._Stopper(dist, "127.0.0.1", port, 3, lambda: None) for _ in range(3)]
            collective = threading.Barrier(3, timeout=10)
            stopped, trained = {}, {}
            def rank(r):
                i = 0
                while True:
                    said = stoppers[r].at_step()
                    if said in (inplace._STOP, inplace._NO_STOP):
                        break
                    if r == 0 and i == %d:
                        threading.Thread(target=stoppers[0].propose, args=(1.0,)).start()
                    collective.wait()  # a step every rank must take
                    trained[r] = i
                    time.sleep(0.02 if r < 2 else %f)
                    i += 1
                stopped[r] = [i, said]
            threads = [threading.Thread(target=rank, args=(r,)) for r in range(3)]
            [t.start() for t in threads]
            [t.join(20) for t in threads]
            heard = [st.heard for st in stoppers]
            print(json.dumps({"stopped": stopped, "latest": max(heard) + 1, "trained": trained}))
            for st in stoppers:
                st.close()
        """ % (notice_at, ahead_pad))
        self.assertEqual(out.returncode, 0, out.stderr)
        return json.loads(out.stdout)

    def test_the_ranks_stop_together_at_the_step_after_the_latest_one_a_rank_was_in(self):
        # Rank 2 begins each step as soon as the collective ends, while the
        # others still pad theirs: it may hear of the stop a step ahead.
        for notice_at, pad in ((5, 0.0), (5, 0.02), (0, 0.0), (3, 0.005)):
            got = self.stop(notice_at, pad)
            self.assertEqual(len(got["stopped"]), 3, got)
            self.assertEqual({tuple(v) for v in got["stopped"].values()}, {(got["latest"], "stop")}, "the ranks did not stop together, at the step after the latest one a rank heard in: %s" % got)
            self.assertEqual(set(got["trained"].values()), {got["latest"] - 1}, got)
            self.assertLessEqual(got["latest"], notice_at + 2, got)

    def test_a_stop_heard_before_the_first_step_stops_there(self):
        out = run_script("""
            import socket
            import torch.distributed as dist
            from elastic import inplace
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            server = dist.TCPStore("127.0.0.1", port, 2, True, wait_for_workers=False)
            stopper = inplace._Stopper(dist, "127.0.0.1", port, 1, lambda: None)
            stopper.propose(1.0)
            stopper.settled.wait(5)
            print(stopper.heard, stopper.stop_at, stopper.at_step())
            stopper.close()
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "-1 0 stop")

    def test_a_rank_that_never_says_where_it_was_ends_the_wait_in_time(self):
        # A rank frozen, or whose store failed, cannot say: the others wait
        # three typical steps and a quarter of a second, then are cut.
        out = run_script("""
            import socket, time
            import torch.distributed as dist
            from elastic import inplace
            s = socket.socket(); s.bind(("127.0.0.1", 0)); port = s.getsockname()[1]; s.close()
            server = dist.TCPStore("127.0.0.1", port, 3, True, wait_for_workers=False)
            inplace._step_times.add(0.02)
            stopper = inplace._Stopper(dist, "127.0.0.1", port, 2, lambda: None)  # the other rank never comes
            print(stopper.at_step())
            stopper.propose(1.0)
            while stopper.heard is None:
                time.sleep(0.01)
            began = time.monotonic()
            said = stopper.at_step()
            print(said, "%.1f" % (time.monotonic() - began))
            stopper.close()
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.split(), ["not", "heard", "no", "stop", "0.3"])


class Cut(unittest.TestCase):
    def test_a_cut_shuts_only_the_sockets_it_saw(self):
        # gloo closes a connection its peer closed; the descriptor may hold
        # another socket (the script's) by the time a leave cuts.
        out = run_script("""
            import socket
            from elastic import inplace
            server = socket.create_server(("127.0.0.1", 0))
            before = inplace._sockets()
            a = socket.create_connection(server.getsockname())
            b, _ = server.accept()
            seen = inplace._new_sockets(before)
            fd = a.fileno()
            a.close()
            c = socket.create_connection(server.getsockname())
            d, _ = server.accept()
            assert c.fileno() == fd, "the descriptor was not reused"
            for n, link in seen.items():
                inplace._shutdown(n, link, None)
            c.sendall(b"x")
            print("seen", len(seen), "kept", d.recv(1), "shut", b.recv(1))
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "seen 2 kept b'x' shut b''")


class Leave(unittest.TestCase):
    def test_a_store_that_does_not_answer_a_proposal_cuts(self):
        # c10d raises a store's timeout as TimeoutError, an OSError: a
        # leave whose proposal fails so cuts, and raises nothing into the
        # thread that reads the guard's messages.
        out = run_script("""
            import threading, time
            from elastic import inplace
            gen = inplace.Generation({"RANK": "1", "WORLD_SIZE": "2"}, in_place=False)
            group = inplace._Group(gen, "gloo", None)
            class Gone:
                heard = None
                settled = threading.Event()
                def propose(self, wait):
                    raise TimeoutError("the client socket has timed out")
            group.stopper, group.fds = Gone(), {}
            inplace._step_times.add(0.02)
            gen._held, gen._step_began = 5, time.monotonic()
            group.leave()
            print("cut" if group.cut_done else "not cut", group.stopping)
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "cut True")


    def test_a_proposal_to_a_store_that_never_answers_gives_up(self):
        # rank 0, which serves the store, stopped (SIGSTOP): the proposal
        # waits a quarter of a second, then the rank is cut.
        out = run_script("""
            import threading
            from elastic import inplace
            stopper = inplace._Stopper.__new__(inplace._Stopper)
            class Silent:
                def set(self, *args):
                    threading.Event().wait()
            stopper.proposer = Silent()
            print(stopper.propose(0.25))
        """)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "False", "it gave up, and did not wait for the store")


class StepTimes(unittest.TestCase):
    def test_a_typical_step_is_the_median_of_the_recent(self):
        from elastic import inplace

        times = inplace._StepTimes()
        self.assertIsNone(times.typical())
        for s in [0.02] * 20 + [5.0]:
            times.add(s)
        self.assertEqual(times.typical(), 0.02)
        self.assertEqual(len(times.recent), 16)


if __name__ == "__main__":
    unittest.main()
