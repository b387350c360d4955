package memckpt

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProgressWarmInterpreterAttachesAtGo runs the guard's warm bootstrap
// (guard/warm.py) as the guard does: descriptor 3 its go pipe, 4 its ready
// pipe, 5 its page, named by ELASTIC_PROGRESS_FD in the go message's
// environment only. torch preloaded, the hooks go in at once; not
// preloaded, when the script imports it.
func TestProgressWarmInterpreterAttachesAtGo(t *testing.T) {
	requireTorch(t)
	bootstrap, err := os.ReadFile("../guard/warm.py")
	require.NoError(t, err)
	dir := moduleDir(t)
	script := fmt.Sprintf(trainScript, `opt = torch.optim.SGD(model.parameters(), lr=0.01)
import os
print("variable:", os.environ.get("ELASTIC_PROGRESS_FD"), flush=True)`, `loss(); opt.step()`)
	for _, preload := range [][]string{{"torch"}, {"json"}} {
		t.Run(fmt.Sprint(preload), func(t *testing.T) {
			work := t.TempDir()
			require.NoError(t, os.WriteFile(work+"/train.py", []byte(script), 0o644))
			page := newPage(t)
			goR, goW, err := os.Pipe()
			require.NoError(t, err)
			readyR, readyW, err := os.Pipe()
			require.NoError(t, err)
			defer goW.Close()
			defer readyR.Close()
			p := startPy(t, python, pyEnv(dir), []*os.File{goR, readyW, page},
				append([]string{"-c", string(bootstrap), work}, preload...)...)
			goR.Close()
			readyW.Close()
			// The imports are done when it says so.
			b := make([]byte, 1)
			_, err = readyR.Read(b)
			require.NoError(t, err, "output:\n%s", p.output())

			env := map[string]string{"ELASTIC_PROGRESS_FD": "5"}
			for _, kv := range pyEnv(dir) {
				k, v, _ := strings.Cut(kv, "=")
				env[k] = v
			}
			msg, err := json.Marshal(map[string]any{"env": env, "cwd": work, "argv": []string{"train.py"}, "script": "train.py"})
			require.NoError(t, err)
			_, err = goW.Write(msg)
			require.NoError(t, err)
			require.NoError(t, goW.Close())

			p.expect(p.out, "variable: None")
			p.expect(p.out, "trained True")
			p.succeed()
			pid := uint64(p.cmd.Process.Pid)
			assert.Equal(t, uint64(trainSteps), word(t, page, offSteps))
			assert.Equal(t, pid, word(t, page, offAttached))
			assert.Equal(t, pid|dumpSignal(t, python)<<32, word(t, page, offDump))
			assert.Less(t, word(t, page, offLastStep), word(t, page, offLastActivity))
		})
	}
}
