package trainerenv_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/trainerenv"
)

func TestLaunchCommandOf(t *testing.T) {
	for _, tc := range []struct {
		argv  []string
		want  trainerenv.LaunchCommand
		error string
	}{
		{argv: []string{"python", "train.py"}},
		{argv: []string{"python", "-c", "import paddle.distributed.launch"}},
		{argv: []string{"/usr/bin/python3", "-m", "mymod", "-m", "paddle.distributed.launch"}},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "train_fleet.py"}, want: trainerenv.LaunchCommand{Launcher: trainerenv.PaddleLaunch}},
		{argv: []string{"python3", "-u", "-X", "dev", "-mpaddle.distributed.launch", "--nproc_per_node=4", "--log_dir", "log", "train.py", "--rank", "3"},
			want: trainerenv.LaunchCommand{Launcher: trainerenv.PaddleLaunch, NProcPerNode: 4}},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "--nproc-per-node", "2", "t.py"}, want: trainerenv.LaunchCommand{Launcher: trainerenv.PaddleLaunch, NProcPerNode: 2}},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "--master", "10.0.0.1:8090", "t.py"}, error: "--master: under the sidecar the generation gives it (PADDLE_MASTER); drop it"},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "--nnodes=2:4", "t.py"}, error: "--nnodes"},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "--elastic_server=127.0.0.1:2379", "t.py"}, error: "--elastic_server"},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "--nproc_per_node", "x", "t.py"}, error: `--nproc_per_node "x"`},
		{argv: []string{"python", "-m", "paddle.distributed.launch", "--log_dir", "log"}, error: "no training script"},
		{argv: []string{"torchrun", "--nproc-per-node", "2", "t.py"}, error: "torchrun is a launcher"},
		{argv: []string{"python", "-m", "torch.distributed.run", "t.py"}, error: "coordinator run --np 2 --nproc-per-node 4 -- python train.py"},
		{argv: []string{"msrun", "--worker_num", "8", "t.py"}, error: "coordinator run --np 2 --schedulers 1"},
		{argv: []string{"fleetrun", "t.py"}, error: "legacy launcher"},
		{argv: []string{"python3", "-m", "torch.distributed.launch", "t.py"}, error: "python -m torch.distributed.launch is a launcher"},
		{argv: []string{"python3", "-Esm", "paddle.distributed.launch", "t.py"}, want: trainerenv.LaunchCommand{Launcher: trainerenv.PaddleLaunch}},
		{argv: []string{"python3", "-Wignore", "-uX", "dev", "-m", "paddle.distributed.launch", "t.py"}, want: trainerenv.LaunchCommand{Launcher: trainerenv.PaddleLaunch}},
		{argv: []string{"/usr/bin/env", "-u", "X", "A=1", "python3", "-m", "paddle.distributed.launch", "--gpus", "0,1,2", "t.py"},
			want: trainerenv.LaunchCommand{Launcher: trainerenv.PaddleLaunch, Devices: 3}},
		{argv: []string{"python3", "-uc", "import paddle"}},
	} {
		got, err := trainerenv.LaunchCommandOf(tc.argv)
		if tc.error != "" {
			require.Error(t, err, "%q", tc.argv)
			assert.Contains(t, err.Error(), tc.error)
			assert.NotContains(t, err.Error(), "\n")
			continue
		}
		require.NoError(t, err, "%q", tc.argv)
		assert.Equal(t, tc.want, got, "%q", tc.argv)
	}
}

func TestParseFramework(t *testing.T) {
	for in, want := range map[string]trainerenv.Framework{"": trainerenv.AnyFramework, "auto": trainerenv.AnyFramework,
		"PyTorch": trainerenv.PyTorch, "torch": trainerenv.PyTorch, "paddlepaddle": trainerenv.Paddle, "mindspore": trainerenv.MindSpore} {
		got, err := trainerenv.ParseFramework(in)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	_, err := trainerenv.ParseFramework("tensorflow")
	assert.EqualError(t, err, `framework "tensorflow": want auto, pytorch, paddle or mindspore`)
}

// FuzzLaunchCommandOf: any command reads without a panic, and an error is
// one line.
func FuzzLaunchCommandOf(f *testing.F) {
	f.Add("python\x00-m\x00paddle.distributed.launch\x00--nproc_per_node=2\x00t.py")
	f.Add("python3\x00-mpaddle.distributed.launch\x00--master")
	f.Add("torchrun\x00t.py")
	f.Fuzz(func(t *testing.T, joined string) {
		argv := strings.Split(joined, "\x00")
		_, err := trainerenv.LaunchCommandOf(argv)
		if err != nil && strings.Contains(err.Error(), "\n") {
			t.Fatalf("a two-line error: %q", err)
		}
	})
}
