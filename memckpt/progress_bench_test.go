package memckpt

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

// progressCostScript measures, in a process with a page, what counting
// costs: an optimizer step's hook (a no-op optimizer stepped with and
// without it), the backward pass's wrapper, and a training loop of about
// 20 ms steps run in blocks with the hooks and without them, interleaved.
// It prints "name value" lines.
const progressCostScript = `import statistics, time, timeit, types, torch
import elastic.progress as progress
assert progress.attached()
torch.set_num_threads(1)
Opt = torch.optim.Optimizer
hooked = (Opt._optimizer_step_code, torch.autograd.backward)
plain = tuple(f.__wrapped__ for f in hooked)

def use(fs):
    Opt._optimizer_step_code, torch.autograd.backward = fs

def best(stmt, g, n):
    return min(timeit.repeat(stmt, globals=g, number=n, repeat=5)) / n * 1e9

class Nop(Opt):
    def __init__(self, params):
        super().__init__(params, {})

    def step(self, closure=None):
        return None

nop = Nop([torch.zeros(1, requires_grad=True)])
use(plain)
a = best("o.step()", {"o": nop}, 100000)
use(hooked)
b = best("o.step()", {"o": nop}, 100000)
print("step-hook-ns", b - a)
fake = types.SimpleNamespace(backward=lambda *a, **k: None)
raw = fake.backward
progress._patch_autograd(fake)
a = best("f(1, None)", {"f": raw}, 300000)
b = best("f(1, None)", {"f": fake.backward}, 300000)
print("backward-hook-ns", b - a)

def loop(width):
    torch.manual_seed(0)
    m = torch.nn.Sequential(torch.nn.Linear(width, width), torch.nn.ReLU(), torch.nn.Linear(width, 10))
    o = torch.optim.Adam(m.parameters())
    x, y = torch.randn(64, width), torch.randint(0, 10, (64,))

    def one():
        o.zero_grad()
        torch.nn.functional.cross_entropy(m(x), y).backward()
        o.step()
    return one

width, one = 256, loop(256)
for _ in range(3):  # about 20 ms a step on this machine
    one()
    t = time.perf_counter()
    for _ in range(5):
        one()
    per = (time.perf_counter() - t) / 5
    width = max(16, int(width * (0.020 / per) ** 0.5))
    one = loop(width)
times = {"plain": [], "hooked": []}
for block in range(12):
    order = (("plain", plain), ("hooked", hooked)) if block % 2 else (("hooked", hooked), ("plain", plain))
    for name, fs in order:
        use(fs)
        one()
        t = time.perf_counter()
        for _ in range(20):
            one()
        times[name].append((time.perf_counter() - t) / 20 * 1e3)
use(hooked)
print("loop-width", width)
print("loop-plain-ms", statistics.median(times["plain"]))
print("loop-hooked-ms", statistics.median(times["hooked"]))
`

// BenchmarkProgressCost is what counting progress costs a training step:
//
//	go test ./memckpt/ -run '^$' -bench BenchmarkProgressCost -benchtime 1x
func BenchmarkProgressCost(b *testing.B) {
	if _, err := os.Stat(python); err != nil {
		b.Skip(err)
	}
	dir := moduleDir(b)
	script := filepath.Join(dir, "cost.py")
	require.NoError(b, os.WriteFile(script, []byte(progressCostScript), 0o644))
	page := newPage(b)
	for range b.N {
		cmd := exec.Command(python, script)
		cmd.Env = pyEnv(dir, "ELASTIC_PROGRESS_FD=3")
		cmd.ExtraFiles = []*os.File{page}
		raw, err := cmd.CombinedOutput()
		out := string(raw)
		if err != nil {
			b.Fatalf("%v\n%s", err, out)
		}
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			name, value, _ := strings.Cut(line, " ")
			v, err := strconv.ParseFloat(value, 64)
			if err != nil {
				b.Fatalf("%q: %v\n%s", line, err, out)
			}
			b.ReportMetric(v, name)
		}
	}
}
