"""A trainer that does nothing: it records when it started and waits to be stopped.

Each start appends "generation rank world_size unix_time pid" to $BENCH_LOG, so
that the harness sees when every trainer of a generation runs. Under torchrun,
the generation is TORCHELASTIC_RESTART_COUNT + 1.
"""
import os
import signal
import time

generation = os.environ.get("ELASTIC_GENERATION") or str(int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")) + 1)
with open(os.environ["BENCH_LOG"], "a") as f:
    f.write(f"{generation} {os.environ['RANK']} {os.environ['WORLD_SIZE']} {time.time():.6f} {os.getpid()}\n")
signal.signal(signal.SIGTERM, signal.SIG_DFL)
while True:
    signal.pause()
