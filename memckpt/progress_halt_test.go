package memckpt

import (
	"encoding/binary"
	"fmt"
	"os"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// offHalt is the page's word the guard writes when the generation stops
// with stacks.
const offHalt = 96

// haltScript does action once a line arrives on its standard input, and
// says so.
const haltScript = `import sys
import elastic
%s
n = 0
while True:
    sys.stdin.readline()
    n += 1
    %s
    print("did", n, flush=True)
`

// Once the guard halts the page (a stop with stacks: the generation is
// over), the thread that reaches the next progress event or sign of life
// waits there for the kill: a beat, a save (before it is sent), a
// backward's start, an optimizer step's end. Its stack says where.
func TestProgressAHaltedPageParksTheNextEvent(t *testing.T) {
	requireTorch(t)
	dir := moduleDir(t)
	torchSetup := "import torch\nw = torch.zeros(2, requires_grad=True)\nopt = torch.optim.SGD([w], lr=0.1)"
	for _, tc := range []struct {
		name, setup, action, in string
	}{
		{"beat", "", "elastic.beat(step=n)", "step"},
		{"save", "", `elastic.save({"step": n})`, "halt_point"},
		{"backward", torchSetup, "(w * 2).sum().backward()", "backward"},
		{"optimizer step", torchSetup + "\n(w * 2).sum().backward()", "opt.step()", "_stepped"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			page := newPage(t)
			script := writeScript(t, "halt.py", fmt.Sprintf(haltScript, tc.setup, tc.action))
			p := startPy(t, python, pyEnv(dir, "ELASTIC_PROGRESS_FD=3"), []*os.File{page}, script)
			p.reply()
			p.expect(p.out, "did 1")
			steps := word(t, page, offSteps)

			var one [8]byte
			binary.LittleEndian.PutUint64(one[:], 1)
			_, err := page.WriteAt(one[:], offHalt)
			require.NoError(t, err)
			p.reply()
			// The stack, written on the guard's signal, has the thread
			// waiting where the action reached the module, once it has
			// (a stack ends with the script's own frame).
			dump := word(t, page, offDump)
			var stack []string
			for tries := 0; !slices.ContainsFunc(stack, func(l string) bool { return strings.HasSuffix(l, " in _park") }); tries++ {
				require.Less(t, tries, 1000, "never parked; its last stack:\n%s", strings.Join(stack, "\n"))
				require.NoError(t, syscall.Kill(int(dump&0xffffffff), syscall.Signal(dump>>32)))
				stack = nil
				for len(stack) == 0 || !strings.HasSuffix(stack[len(stack)-1], " in <module>") {
					stack = append(stack, p.expect(p.errs, ""))
				}
			}
			park := slices.IndexFunc(stack, func(l string) bool { return strings.HasSuffix(l, " in _park") })
			require.Less(t, park+1, len(stack))
			assert.Contains(t, stack[park], "elastic/progress.py")
			assert.Contains(t, stack[park+1], "elastic/progress.py")
			assert.True(t, strings.HasSuffix(stack[park+1], " in "+tc.in), "parked from %s:\n%s", tc.in, strings.Join(stack, "\n"))
			assert.Equal(t, steps, word(t, page, offSteps), "no event was counted")
			assert.NotContains(t, p.output(), "did 2")
		})
	}
}
