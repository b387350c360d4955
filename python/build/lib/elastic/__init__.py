"""The trainers' side of the elastic training coordinator.

One job per module:

* elastic.checkpoint: save, load, flush and fenced_replace, checkpoints
  held in memory by the node's sidecar; beat and quiet, progress events
  for the hang watch.
* elastic.progress: the progress page the node's guard reads (every torch
  optimizer step counts, with no change to the script); mapped before the
  script runs.
* elastic.inplace: run, training in place: the process, and everything
  set up before run(), outlives generations.

    import elastic

    model, optimizer = Net(), torch.optim.SGD(...)    # the start-up: once per process

    def train(gen):                                   # once per generation
        ddp = DistributedDataParallel(model)
        for step in gen.steps(1000):
            ...
            elastic.save({"model": model.state_dict(), "optimizer": optimizer.state_dict(), "step": step})

    elastic.run(train, state={"model": model, "optimizer": optimizer})

Every sidecar puts this package on its trainers' PYTHONPATH. Outside one,
install it with `pip install ./python` (from the coordinator's source) or
`coordinator python-module DIR`; there save and load use the checkpoint
file alone, and run trains once, as a plain script.
"""

# The modules, as the package's attributes: progress may have been loaded
# on its own before (sitecustomize), which binds no attribute.
from . import checkpoint, inplace, progress  # noqa: F401
from .checkpoint import (CheckpointError, FencedError, TooLargeError, beat, fenced_replace, flush, load, quiet,
                         save)
from .inplace import Generation, GenerationOver, run

# Their public name: a traceback says elastic.FencedError, as the scripts
# catch it.
for _cls in (CheckpointError, FencedError, TooLargeError, Generation, GenerationOver):
    _cls.__module__ = __name__
del _cls

__all__ = ["save", "load", "flush", "fenced_replace", "beat", "quiet", "run", "Generation", "GenerationOver",
           "CheckpointError", "FencedError", "TooLargeError"]
