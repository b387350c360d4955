package memckpt

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"golang.org/x/sys/unix"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/internal/testkit/pythons"
)

// trainScript trains a small MLP for 9 steps with the optimizer setup
// makes, stepped by step; then one more backward pass, which is a sign of
// life and no step. It imports nothing of ours.
const trainScript = `import torch
torch.manual_seed(0)
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 1))
x, y = torch.randn(32, 8), torch.randn(32, 1)
%s
def loss():
    opt.zero_grad()
    l = torch.nn.functional.mse_loss(model(x), y)
    l.backward()
    return l
for _ in range(9):
    %s
loss()
print("trained", float(loss()) < float("inf"), flush=True)
`

const trainSteps = 9

// TestProgressCountsEveryOptimizerStep, on torch 1.13 (Optimizer's
// _optimizer_step_code) and torch 2.15 (its global step post hooks).
func TestProgressCountsEveryOptimizerStep(t *testing.T) {
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) { progressCountsEveryOptimizerStep(t, py.Path) })
	}
}

func progressCountsEveryOptimizerStep(t *testing.T, python string) {
	dir := moduleDir(t)
	sig := dumpSignal(t, python)
	for _, tc := range []struct {
		name, setup, step string
	}{
		{"adam", `opt = torch.optim.Adam(model.parameters(), lr=1e-3)`, `loss(); opt.step()`},
		{"sgd", `opt = torch.optim.SGD(model.parameters(), lr=0.01, momentum=0.9)`, `loss(); opt.step()`},
		{"lbfgs, whose closure runs backward inside the step", `opt = torch.optim.LBFGS(model.parameters(), max_iter=3)`, `opt.step(loss)`},
		{"the user's own optimizer", `
class Plain(torch.optim.Optimizer):
    def __init__(self, params, lr):
        super().__init__(params, dict(lr=lr))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is not None:
                    p.add_(p.grad, alpha=-group["lr"])

opt = Plain(model.parameters(), lr=0.01)`, `loss(); opt.step()`},
		{"a subclass calling super().step(), both steps wrapped", `
torch.optim.Adam(model.parameters())  # Adam's own step is wrapped now too

class Clipped(torch.optim.Adam):
    def step(self, closure=None):
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        return super().step(closure)

opt = Clipped(model.parameters(), lr=1e-3)`, `loss(); opt.step()`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := newPage(t)
			script := writeScript(t, "train.py", fmt.Sprintf(trainScript, tc.setup, tc.step))
			before := uint64(guard.MonoNow())
			p := startPy(t, python, pyEnv(dir, "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, script)
			p.expect(p.out, "trained True")
			p.succeed()
			after := uint64(guard.MonoNow())

			pid := uint64(p.cmd.Process.Pid)
			assert.Equal(t, uint64(trainSteps), word(t, page, offSteps), "steps")
			last, act := word(t, page, offLastStep), word(t, page, offLastActivity)
			assert.Less(t, before, last, "the last step is this run's")
			assert.Less(t, last, act, "the backward pass after the last step is a sign of life")
			assert.LessOrEqual(t, act, after)
			assert.Zero(t, word(t, page, offUserStep), "no step named")
			assert.Zero(t, word(t, page, offQuietUntil))
			assert.Equal(t, pid, word(t, page, offAttached), "attached pid")
			assert.Equal(t, pid|sig<<32, word(t, page, offDump), "dump: pid | signal<<32")
		})
	}
}

// A rank that resumes from the state another rank saved (elastic.load),
// and never saves or names a step itself, numbers its optimizer steps
// from the state's step on: the job's steps, as the rank that saves
// names them.
func TestProgressNamesTheJobsStepsAfterALoad(t *testing.T) {
	for _, py := range pythons.Torches(t) {
		t.Run(py.Name, func(t *testing.T) { progressNamesTheJobsStepsAfterALoad(t, py.Path) })
	}
}

func progressNamesTheJobsStepsAfterALoad(t *testing.T, python string) {
	dir := moduleDir(t)
	setup := `import elastic
elastic.save({"step": 100})   # stands for the rank that saves
assert elastic.load()["step"] == 100
opt = torch.optim.SGD(model.parameters(), lr=0.01)`
	page := newPage(t)
	script := writeScript(t, "train.py", fmt.Sprintf(trainScript, setup, `loss(); opt.step()`))
	p := startPy(t, python, pyEnv(dir, "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, script)
	p.expect(p.out, "trained True")
	p.succeed()
	assert.Equal(t, uint64(trainSteps+1), word(t, page, offSteps), "the save, and the steps")
	assert.Equal(t, uint64(100+trainSteps), word(t, page, offUserStep), "the job's step")
}

// progressScript says where it is ("at NAME") and waits for a line on
// stdin, so that the test reads the page there.
const progressScript = `import os, subprocess, sys
import elastic

def at(name):
    print("at", name, flush=True)
    sys.stdin.readline()

assert "ELASTIC_PROGRESS_FD" not in os.environ
# The page's descriptor is closed; a duplicate the mapping keeps (Python
# before 3.13) is not inherited.
pages = []
for fd in os.listdir("/proc/self/fd"):
    try:
        if os.readlink("/proc/self/fd/" + fd).startswith("/memfd:"):
            pages.append((int(fd), os.get_inheritable(int(fd))))
    except OSError:
        pass
print("page descriptors", pages, flush=True)
assert all(fd != 3 and not inheritable for fd, inheritable in pages), pages
child = subprocess.run([sys.executable, "-c", "import os, sitecustomize; print(os.environ.get('ELASTIC_PROGRESS_FD'), sitecustomize.progress_module().attached())"],
                       stdout=subprocess.PIPE, universal_newlines=True, check=True)
print("child", child.stdout.strip(), flush=True)

elastic.beat(step=7)
at("beat")
with elastic.quiet(30):
    at("quiet")
    with elastic.quiet(60):
        at("longer")
    at("outer")
    with elastic.quiet(1):
        at("shorter")
at("after")
elastic.save({"step": 12, "w": [1, 2]})
at("saved")
elastic.beat()
at("beat again")
elastic.beat()
assert elastic.load()["step"] == 12
elastic.beat()
at("resumed")
for bad in (-1, "5", float("nan"), True, None):
    try:
        elastic.quiet(bad)
    except ValueError as e:
        assert "\n" not in str(e), e
        print("refused:", e, flush=True)
    else:
        raise SystemExit("quiet(%r) was taken" % (bad,))
try:
    elastic.beat(step=-1)
except ValueError as e:
    print("refused:", e, flush=True)
print("done", flush=True)
`

func TestProgressBeatQuietAndSave(t *testing.T) {
	dir := moduleDir(t)
	for _, py := range interpreters(t) {
		t.Run(py, func(t *testing.T) {
			sig := dumpSignal(t, py)
			page := newPage(t)
			script := writeScript(t, "progress.py", progressScript)
			start := uint64(guard.MonoNow())
			p := startPy(t, py, pyEnv(dir, "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, script)
			pid := uint64(p.cmd.Process.Pid)
			p.expect(p.out, "page descriptors")
			p.expect(p.out, "child None False")

			// at waits for the script to reach name; it returns the time
			// then.
			at := func(name string) uint64 {
				p.expect(p.out, "at "+name)
				return uint64(guard.MonoNow())
			}
			now := at("beat")
			assert.Equal(t, uint64(1), word(t, page, offSteps))
			assert.Equal(t, uint64(7), word(t, page, offUserStep))
			beat := word(t, page, offLastStep)
			assert.True(t, start < beat && beat <= now, "the beat's time")
			assert.Equal(t, beat, word(t, page, offLastActivity))
			assert.Equal(t, pid, word(t, page, offAttached))
			assert.Equal(t, pid|sig<<32, word(t, page, offDump))

			p.reply()
			before, now := now, at("quiet")
			q := word(t, page, offQuietUntil)
			const s = uint64(time.Second)
			assert.True(t, before+30*s <= q && q <= now+30*s, "quiet(30) ends 30 s after it began: %d not in [%d, %d]", q, before+30*s, now+30*s)
			p.reply()
			before, now = now, at("longer")
			longer := word(t, page, offQuietUntil)
			assert.True(t, before+60*s <= longer && longer <= now+60*s, "a nested quiet(60) ends later")
			p.reply()
			at("outer")
			assert.Equal(t, q, word(t, page, offQuietUntil), "the outer phase's end again")
			p.reply()
			now = at("shorter")
			assert.Equal(t, q, word(t, page, offQuietUntil), "a nested shorter phase keeps the later end")
			p.reply()
			at("after")
			assert.Zero(t, word(t, page, offQuietUntil), "no phase under way")
			assert.Less(t, now, word(t, page, offLastActivity), "the end of a phase is a sign of life")
			assert.Equal(t, beat, word(t, page, offLastStep), "and no step")
			assert.Equal(t, uint64(1), word(t, page, offSteps))

			p.reply()
			now = at("saved")
			assert.Equal(t, uint64(2), word(t, page, offSteps), "a save is a progress event")
			assert.Equal(t, uint64(12), word(t, page, offUserStep), "its state's step")
			assert.Less(t, beat, word(t, page, offLastStep))
			p.reply()
			at("beat again")
			assert.Equal(t, uint64(3), word(t, page, offSteps))
			assert.Equal(t, uint64(13), word(t, page, offUserStep), "a beat without a step is the step after the last named")
			assert.Less(t, now, word(t, page, offLastStep))
			p.reply()
			at("resumed")
			assert.Equal(t, uint64(5), word(t, page, offSteps))
			assert.Equal(t, uint64(13), word(t, page, offUserStep), "the step after the one the state loaded was saved at")

			p.reply()
			p.expect(p.out, "done")
			p.succeed()
			assert.Equal(t, 6, strings.Count(p.output(), "refused: elastic."), "%s", p.output())
			assert.Contains(t, p.output(), "refused: elastic.quiet: seconds must be a number >= 0, not -1")
			assert.Contains(t, p.output(), "refused: elastic.quiet: seconds must be a number >= 0, not a str")
		})
	}
}

func TestProgressSignalWritesTheStacks(t *testing.T) {
	dir := moduleDir(t)
	for _, py := range interpreters(t) {
		t.Run(py, func(t *testing.T) {
			page := newPage(t)
			script := writeScript(t, "stuck.py", `import sys

def stuck_here():
    print("stuck", flush=True)
    sys.stdin.readline()

stuck_here()
print("went on", flush=True)
`)
			p := startPy(t, py, pyEnv(dir, "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, script)
			p.expect(p.out, "stuck")
			dump := word(t, page, offDump)
			pid, sig := int(dump&0xffffffff), syscall.Signal(dump>>32)
			require.Equal(t, p.cmd.Process.Pid, pid)
			require.Equal(t, syscall.Signal(dumpSignal(t, py)), sig)

			require.NoError(t, syscall.Kill(pid, sig))
			p.expect(p.errs, "most recent call first")
			line := p.expect(p.errs, "stuck_here")
			assert.Contains(t, line, "stuck.py")
			// The process goes on after its stacks were written.
			p.reply()
			p.expect(p.out, "went on")
			p.succeed()
		})
	}
}

// siteScript says whether the user's sitecustomize ran, which one ours
// ran after it, and whether the process has its page.
const siteScript = `import os, sys
import sitecustomize
print("user sitecustomize:", os.environ.get("USER_SITECUSTOMIZE"))
print("shadowed:", getattr(sitecustomize.shadowed, "__file__", None))
print("attached:", "elastic.progress" in sys.modules and sys.modules["elastic.progress"].attached())
try:
    import torch
    opt = torch.optim.SGD([torch.zeros(2, requires_grad=True)], lr=0.1)
    opt.step()
    print("stepped torch", flush=True)
except ImportError:
    print("no torch", flush=True)
`

func TestProgressSitecustomizeChainsAndIsQuietWithoutTheVariable(t *testing.T) {
	dir := moduleDir(t)
	userDir := t.TempDir()
	userSite := filepath.Join(userDir, "sitecustomize.py")
	require.NoError(t, os.WriteFile(userSite, []byte("import os\nos.environ['USER_SITECUSTOMIZE'] = 'ran'\n"), 0o644))
	script := writeScript(t, "site.py", siteScript)
	for _, py := range interpreters(t) {
		// The sitecustomize the interpreter runs without ours.
		cmd := exec.Command(py, "-c", "import sitecustomize; print(sitecustomize.__file__)")
		cmd.Env, cmd.Dir = pyEnv(""), t.TempDir()
		out, err := cmd.Output()
		system := strings.TrimSpace(string(out))
		if err != nil {
			system = "None"
		}
		for _, tc := range []struct {
			name       string
			pythonPath string
			variable   bool
			shadowed   string
			user       string
		}{
			{"without the variable", dir, false, system, "None"},
			{"without the variable, the user's sitecustomize after ours", dir + ":" + userDir, false, userSite, "ran"},
			{"with the variable, the user's sitecustomize after ours", dir + ":" + userDir, true, userSite, "ran"},
		} {
			t.Run(py+"/"+tc.name, func(t *testing.T) {
				page := newPage(t)
				env := pyEnv(tc.pythonPath)
				if tc.variable {
					env = append(env, "ELASTIC_PROGRESS_FD=3")
				}
				p := startPy(t, py, env, []*os.File{page}, script)
				p.succeed()
				out := p.output()
				assert.Contains(t, out, "user sitecustomize: "+tc.user)
				assert.Contains(t, out, "shadowed: "+tc.shadowed)
				assert.Contains(t, out, fmt.Sprintf("attached: %v", map[bool]string{true: "True", false: "False"}[tc.variable]))
				if tc.variable {
					assert.Equal(t, uint64(p.cmd.Process.Pid), word(t, page, offAttached))
					if strings.Contains(out, "stepped torch") {
						assert.Equal(t, uint64(1), word(t, page, offSteps))
					}
					return
				}
				content := make([]byte, pageSize)
				_, err := page.ReadAt(content, 0)
				require.NoError(t, err)
				assert.Equal(t, append(append([]byte{}, pageMagic...), make([]byte, pageSize-len(pageMagic))...), content,
					"the page is untouched")
			})
		}
	}
}

// tornScript beats as fast as it can for a second and a half, while the
// test reads its page; its quiet phase lasts until the test has read.
const tornScript = `import sys, time
import elastic
with elastic.quiet(3600):
    print("writing", flush=True)
    end, i = time.monotonic() + 1.5, 0
    while time.monotonic() < end:
        i += 1
        elastic.beat(step=i)
    print("beats", i, flush=True)
    sys.stdin.readline()
`

// TestProgressWordsAreNeverSeenHalfWritten reads a page the way the guard
// does, as fast as it can, while the trainer writes it as fast as it can:
// a word is never seen zero or going back, and a count seen new has its
// times new. struct.pack_into zero-filled each word before writing it, and
// a guard that read a zero last activity in that instant took a rank
// stepping every 20 ms for one quiet since its generation began.
func TestProgressWordsAreNeverSeenHalfWritten(t *testing.T) {
	var reads, bad int
	var first string
	var quiet, steps, lastStep, userStep uint64
	readWhileWriting(t, tornScript, "beats ", func(load func(off int) uint64) {
		if quiet == 0 {
			quiet = load(offQuietUntil)
			require.NotZero(t, quiet, "the trainer's quiet phase")
		}
		reads++
		s := load(offSteps)
		ls, la, us := load(offLastStep), load(offLastActivity), load(offUserStep)
		q := load(offQuietUntil)
		var why string
		switch {
		case s < steps:
			why = fmt.Sprintf("steps %d after %d", s, steps)
		case s > 0 && (ls == 0 || la == 0 || ls < lastStep):
			why = fmt.Sprintf("steps %d with last step %d (before %d), last activity %d", s, ls, lastStep, la)
		case us < userStep:
			why = fmt.Sprintf("user step %d after %d", us, userStep)
		case q != quiet:
			why = fmt.Sprintf("quiet until %d, not %d", q, quiet)
		}
		if why != "" {
			bad++
			if first == "" {
				first = why
			}
		}
		steps, lastStep, userStep = max(steps, s), max(lastStep, ls), max(userStep, us)
	})
	require.NotZero(t, steps, "the trainer beat")
	assert.Zero(t, bad, "of %d reads during %d beats, %d saw a word half written; the first: %s", reads, steps, bad, first)
}

// readWhileWriting runs script with a progress page and, from its line
// "writing" until its line starting with done, calls read as fast as it
// can with a loader of the page's words (atomic, as the guard's); then
// lets the script end.
func readWhileWriting(t *testing.T, script, done string, read func(load func(off int) uint64)) {
	t.Helper()
	page := newPage(t)
	mem, err := unix.Mmap(int(page.Fd()), 0, pageSize, unix.PROT_READ, unix.MAP_SHARED)
	require.NoError(t, err)
	defer unix.Munmap(mem)
	load := func(off int) uint64 { return (*atomic.Uint64)(unsafe.Pointer(&mem[off])).Load() }

	p := startPy(t, python, pyEnv(moduleDir(t), "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, writeScript(t, "writer.py", script))
	p.expect(p.out, "writing")
	for finished := false; !finished; {
		select {
		case line := <-p.out:
			require.True(t, strings.HasPrefix(line, done), "%q", line)
			finished = true
		default:
		}
		for range 10000 {
			read(load)
		}
	}
	p.reply()
	p.succeed()
}

// quietEndScript opens and closes quiet phases as fast as it can, while
// the test reads its page.
const quietEndScript = `import sys, time
import elastic
print("writing", flush=True)
end, i = time.monotonic() + 1.5, 0
while time.monotonic() < end:
    i += 1
    with elastic.quiet(3600):
        pass
print("phases", i, flush=True)
sys.stdin.readline()
`

// TestProgressAPhasesEndIsSeenWithItsSignOfLife reads a page in the
// guard's order, the phase's word and then the last sign of life, while
// the trainer opens and closes quiet phases: a phase seen over always
// comes with a sign of life from its end, not from before it began. The
// trainer cleared the phase first, and a guard that sampled in between
// counted the whole phase as quiet.
func TestProgressAPhasesEndIsSeenWithItsSignOfLife(t *testing.T) {
	const phase = uint64(3600 * time.Second)
	var reads, ends, bad int
	var began uint64 // the start of the latest phase seen under way
	var first string
	readWhileWriting(t, quietEndScript, "phases ", func(load func(off int) uint64) {
		reads++
		q := load(offQuietUntil)
		a := load(offLastActivity)
		if q != 0 {
			began = max(began, q-phase)
			return
		}
		ends++
		if began > 0 && a < began {
			bad++
			if first == "" {
				first = fmt.Sprintf("phase over, last sign of life %d ns before the phase began", began-a)
			}
		}
	})
	require.NotZero(t, ends, "no phase seen over")
	assert.Zero(t, bad, "of %d reads, %d saw no phase, %d of them a sign of life older than the phase; the first: %s", reads, ends, bad, first)
}
