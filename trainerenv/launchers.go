package trainerenv

import (
	"fmt"
	"path/filepath"
	"strconv"
	"strings"
)

// Launcher is a framework's own launcher given to the sidecar as the
// training command.
type Launcher string

const (
	// NoLauncher: the command is the training script itself.
	NoLauncher Launcher = ""
	// PaddleLaunch is python -m paddle.distributed.launch. The sidecar
	// starts it once per node, as a per-node launcher inside the
	// generation: it is told the generation's master, node count and rank
	// the way its own flags would (PADDLE_MASTER, PADDLE_NNODES,
	// PADDLE_RANK: python/paddle/distributed/launch/context/args_envs.py)
	// and starts the node's processes itself.
	PaddleLaunch Launcher = "paddle.distributed.launch"
)

// paddleLaunchCommand is Paddle's launcher's command, as errors write it.
const paddleLaunchCommand = "python -m paddle.distributed.launch"

// LaunchCommand is what a command that runs a framework's launcher is.
type LaunchCommand struct {
	Launcher Launcher
	// NProcPerNode is the launcher's --nproc_per_node, 0 if not given.
	NProcPerNode int
	// Devices is the number of its --devices (or --gpus), 0 if not given:
	// without --nproc_per_node it starts one process a device
	// (launch/controllers/controller.py, pod_replicas).
	Devices int
}

// pythonFlagsWithValue are the interpreter's options that take the next
// argument as their value.
var pythonFlagsWithValue = map[string]bool{"-X": true, "-W": true, "--check-hash-based-pycs": true}

// withoutEnv is argv without a leading env(1) and its assignments and
// options, as in /usr/bin/env python3 -m ...
func withoutEnv(argv []string) []string {
	if len(argv) == 0 || filepath.Base(argv[0]) != "env" {
		return argv
	}
	i := 1
	for i < len(argv) && (strings.HasPrefix(argv[i], "-") || strings.Contains(argv[i], "=")) {
		if argv[i] == "-u" || argv[i] == "-C" || argv[i] == "--unset" || argv[i] == "--chdir" {
			i++ // its value is the next argument
		}
		i++
	}
	return argv[min(i, len(argv)):]
}

// module is the module argv runs with python -m, or "", and the
// arguments after it.
func module(argv []string) (string, []string) {
	if len(argv) == 0 || !strings.HasPrefix(filepath.Base(argv[0]), "python") {
		return "", nil
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "-" || !strings.HasPrefix(a, "-"):
			return "", nil // a script or standard input
		case pythonFlagsWithValue[a]:
			i++
			continue
		case strings.HasPrefix(a, "--"):
			continue
		}
		// A cluster of short options, as -u or -Esm MODULE: -c and -m end
		// it, their value the rest or the next argument.
		for j := 1; j < len(a); j++ {
			switch a[j] {
			case 'c':
				return "", nil
			case 'm':
				if j+1 < len(a) {
					return a[j+1:], argv[i+1:]
				}
				if i+1 < len(argv) {
					return argv[i+1], argv[i+2:]
				}
				return "", nil
			case 'X', 'W':
				if j+1 == len(a) {
					i++ // its value is the next argument
				}
				j = len(a)
			}
		}
	}
	return "", nil
}

// paddleLaunchSetByUs are paddle.distributed.launch's flags the sidecar
// sets for every generation; given by hand, they would fight it.
var paddleLaunchSetByUs = map[string]string{
	"master": "PADDLE_MASTER", "nnodes": "PADDLE_NNODES", "rank": "PADDLE_RANK", "ips": "the generation's nodes",
	"host": "POD_IP", "elastic_server": "the sidecar's etcd", "np": "--np of the sidecar", "elastic_level": "the sidecar's fault tolerance",
	"legacy": "the launcher's current mode", "servers": "--ps of the sidecar", "trainers": "--np of the sidecar",
	"server_num": "--ps of the sidecar", "trainer_num": "--np of the sidecar", "run_mode": "the collective mode",
}

// LaunchCommandOf reads argv: a framework's launcher or the script itself.
// paddle.distributed.launch is run per node; a flag of it that the
// sidecar sets is an error, as is another framework's launcher, which
// cannot run inside a generation: the error says what to write instead.
func LaunchCommandOf(argv []string) (LaunchCommand, error) {
	argv = withoutEnv(argv)
	if len(argv) == 0 {
		return LaunchCommand{}, nil
	}
	mod, args := module(argv)
	name := filepath.Base(argv[0])
	if mod != "" {
		name = "python -m " + mod
	}
	switch base := filepath.Base(argv[0]); {
	case base == "torchrun" || mod == "torch.distributed.run" || mod == "torch.distributed.launch":
		return LaunchCommand{}, fmt.Errorf("%s is a launcher and rendezvous of its own, which would fight the coordinator's: "+
			"give the training script and the processes per node instead, as in: coordinator run --np 2 --nproc-per-node 4 -- python train.py", name)
	case base == "msrun" || mod == "mindspore.parallel.cluster.run":
		return LaunchCommand{}, fmt.Errorf("%s is MindSpore's launcher and starts its own scheduler: give the training script, "+
			"and the job a scheduler node, as in: coordinator run --np 2 --schedulers 1 --nproc-per-node 8 -- python train.py", name)
	case base == "fleetrun" || mod == "paddle.distributed.fleet.launch":
		return LaunchCommand{}, fmt.Errorf("%s is PaddlePaddle's legacy launcher: write %s, or the training script, as in: "+
			"coordinator run --np 2 -- %s train.py", name, paddleLaunchCommand, paddleLaunchCommand)
	case mod != "paddle.distributed.launch":
		return LaunchCommand{}, nil
	}
	lc := LaunchCommand{Launcher: PaddleLaunch}
	for i := 0; i < len(args); i++ {
		a := args[i]
		if !strings.HasPrefix(a, "-") {
			return lc, nil // the training script: the rest is its own
		}
		name, value, inline := strings.Cut(strings.TrimLeft(a, "-"), "=")
		name = strings.ReplaceAll(name, "-", "_")
		if !inline && i+1 < len(args) {
			i++
			value = args[i]
		}
		if why, ok := paddleLaunchSetByUs[name]; ok {
			return lc, fmt.Errorf("%s --%s: under the sidecar the generation gives it (%s); drop it", paddleLaunchCommand, name, why)
		}
		if name == "devices" || name == "gpus" || name == "xpus" || name == "npus" {
			lc.Devices = len(strings.Split(value, ","))
		}
		if name == "nproc_per_node" {
			n, err := strconv.Atoi(value)
			if err != nil || n < 1 {
				return lc, fmt.Errorf("%s --nproc_per_node %q: want a positive whole number", paddleLaunchCommand, value)
			}
			lc.NProcPerNode = n
		}
	}
	return lc, fmt.Errorf("%s: no training script after the launcher's flags", paddleLaunchCommand)
}
