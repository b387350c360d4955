package memckpt

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// torch2 is a stand-in for torch 2's modules as far as the hooks go: the
// optimizer's step wrapper calls the global step post hooks
// (torch/optim/optimizer.py's profile_hook_step), and Tensor.backward
// goes through torch.autograd.backward.
var torch2 = map[string]string{
	"torch/__init__.py":          "from . import autograd\nfrom . import optim\n",
	"torch/autograd/__init__.py": "CALLS = []\n\ndef backward(tensors, grad_tensors=None):\n    CALLS.append(tensors)\n",
	"torch/optim/__init__.py":    "from .optimizer import Optimizer\n",
	"torch/optim/optimizer.py": `import functools
from collections import OrderedDict

_global_optimizer_post_hooks = OrderedDict()


def register_optimizer_step_post_hook(hook):
    _global_optimizer_post_hooks[len(_global_optimizer_post_hooks)] = hook


class Optimizer:
    def __init__(self, params, defaults):
        self._patch_step_function()

    def _optimizer_step_code(self):
        pass

    @staticmethod
    def profile_hook_step(func):
        @functools.wraps(func)
        def wrapper(*args, **kwargs):
            self, *_ = args
            out = func(*args, **kwargs)
            self._optimizer_step_code()
            for post_hook in _global_optimizer_post_hooks.values():
                post_hook(self, args, kwargs)
            return out

        return wrapper

    def _patch_step_function(self):
        hooked = getattr(self.__class__.step, "hooked", None)
        if not hooked:
            self.__class__.step = self.profile_hook_step(self.__class__.step)
            self.__class__.step.hooked = True
`,
}

// TestProgressUsesTorch2sGlobalStepHook: with torch 2's
// register_optimizer_step_post_hook the step is counted by it, once for a
// step that calls its parent's.
func TestProgressUsesTorch2sGlobalStepHook(t *testing.T) {
	dir := moduleDir(t)
	fake := t.TempDir()
	for name, src := range torch2 {
		require.NoError(t, os.MkdirAll(filepath.Dir(filepath.Join(fake, name)), 0o755))
		require.NoError(t, os.WriteFile(filepath.Join(fake, name), []byte(src), 0o644))
	}
	script := writeScript(t, "train.py", `import torch
from torch.optim.optimizer import Optimizer, _global_optimizer_post_hooks

class Base(Optimizer):
    def __init__(self):
        super().__init__([], {})

    def step(self):
        pass

class Sub(Base):
    def step(self):
        return super().step()

Base()
opt = Sub()
for _ in range(5):
    torch.autograd.backward("loss")
    opt.step()
torch.autograd.backward("last")
print("hooks", len(_global_optimizer_post_hooks), "patched", hasattr(Optimizer._optimizer_step_code, "__wrapped__"),
      "backward", torch.autograd.CALLS, flush=True)
`)
	for _, py := range interpreters(t) {
		t.Run(py, func(t *testing.T) {
			page := newPage(t)
			p := startPy(t, py, pyEnv(dir+":"+fake, "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, script)
			p.expect(p.out, "hooks 1 patched False backward ['loss', 'loss', 'loss', 'loss', 'loss', 'last']")
			p.succeed()
			assert.Equal(t, uint64(5), word(t, page, offSteps))
			assert.Less(t, word(t, page, offLastStep), word(t, page, offLastActivity), "the last backward pass")
		})
	}
}
