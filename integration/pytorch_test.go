package integration

import (
	"bufio"
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const python = "/usr/bin/python3"

// requireTorch fails in CI, where .ci/run installs Debian's python3-torch,
// and skips elsewhere.
func requireTorch(t *testing.T) {
	t.Helper()
	if err := exec.Command(python, "-c", "import torch.distributed").Run(); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatalf("PyTorch is missing (apt-get install python3-torch): %v", err)
		}
		t.Skipf("PyTorch is missing (apt-get install python3-torch): %v", err)
	}
}

type lossRow struct {
	generation, world, step int
	loss                    float64
}

func readLosses(t *testing.T, file string) []lossRow {
	data, _ := os.ReadFile(file)
	var out []lossRow
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		f := strings.Split(sc.Text(), ",")
		if len(f) != 4 {
			continue
		}
		var r lossRow
		r.generation, _ = strconv.Atoi(f[0])
		r.world, _ = strconv.Atoi(f[1])
		r.step, _ = strconv.Atoi(f[2])
		r.loss, _ = strconv.ParseFloat(f[3], 64)
		out = append(out, r)
	}
	return out
}

func mean(rows []lossRow) float64 {
	s := 0.0
	for _, r := range rows {
		s += r.loss
	}
	return s / float64(len(rows))
}

func TestPyTorchExampleLosesAWorkerAndResumes(t *testing.T) {
	requireTorch(t)
	t.Parallel()
	dir := t.TempDir()
	lossLog := filepath.Join(dir, "loss.csv")
	r := startRun(t, []string{"--np", "2", "--job", "torch"},
		[]string{python, "examples/pytorch/train.py", "--steps", "60", "--step-time", "0.05", "--ckpt-dir", dir, "--loss-log", lossLog})

	require.Eventually(t, func() bool { return len(readLosses(t, lossLog)) >= 10 }, 90*time.Second, 50*time.Millisecond,
		"the first generation never trained 10 steps")
	var rank1 int
	for _, p := range processesWithMarker(r.marker) {
		env, _ := os.ReadFile("/proc/" + strconv.Itoa(p.Pid) + "/environ")
		if strings.Contains(strings.Join(p.Args, " "), "train.py") && bytes.Contains(env, []byte("\x00RANK=1\x00")) {
			rank1 = p.Pid
		}
	}
	require.NotZero(t, rank1, "rank 1's training process")
	require.NoError(t, syscall.Kill(rank1, syscall.SIGKILL))

	assert.Equal(t, 0, r.wait(), "the job finishes after losing a worker")
	rows := readLosses(t, lossLog)
	var first, second []lossRow
	for _, row := range rows {
		switch row.generation {
		case 1:
			first = append(first, row)
		case 2:
			second = append(second, row)
		}
	}
	require.NotEmpty(t, first)
	require.NotEmpty(t, second, "a second generation trained")
	lastBefore := first[len(first)-1].step
	assert.LessOrEqual(t, second[0].step, lastBefore+1, "generation 2 resumed from the checkpoint")
	assert.Greater(t, second[0].step, 1, "generation 2 did not start over")
	assert.Equal(t, 60, rows[len(rows)-1].step)
	assert.Less(t, second[0].loss, first[0].loss, "the resumed model is the trained one")
	n := min(5, len(first), len(second))
	assert.Less(t, mean(second[len(second)-n:]), mean(first[:n]), "the loss keeps falling across the restart")

	for _, row := range rows {
		assert.LessOrEqual(t, row.generation, 2, "one restart: the rank-0 port was bindable again at once")
	}
	assert.Contains(t, r.out.String(), "job torch succeeded")
}
