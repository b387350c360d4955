package trainerenv

import (
	"fmt"
	"strings"

	"github.com/elastictraining/coordinator/membership"
)

// Framework is the framework a job's processes run, whose own launcher's
// contract they are given: exactly its variables, with its meanings where
// two frameworks give one name different ones, and the project's own.
type Framework string

const (
	// AnyFramework gives every framework's variables, with torchrun's
	// meanings where names meet: what a job whose framework is not known
	// gets.
	AnyFramework Framework = ""
	PyTorch      Framework = "pytorch"
	Paddle       Framework = "paddle"
	MindSpore    Framework = "mindspore"
)

// ParseFramework reads a framework's name: pytorch (or torch), paddle (or
// paddlepaddle), mindspore, or auto (or empty) for AnyFramework.
func ParseFramework(s string) (Framework, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "", "auto":
		return AnyFramework, nil
	case "pytorch", "torch":
		return PyTorch, nil
	case "paddle", "paddlepaddle":
		return Paddle, nil
	case "mindspore":
		return MindSpore, nil
	}
	return AnyFramework, fmt.Errorf("framework %q: want auto, pytorch, paddle or mindspore", s)
}

// String is the framework's name as ParseFramework reads it.
func (f Framework) String() string {
	if f == AnyFramework {
		return "auto"
	}
	return string(f)
}

// family is whose a variable is: the project's, a framework's, or the
// input of a framework's launcher that the sidecar runs once per node.
type family uint8

const (
	ours family = 1 << iota
	torchFamily
	paddleFamily
	mindsporeFamily
	// paddleLaunchFamily is what paddle.distributed.launch, run by the
	// sidecar as a per-node launcher, reads to join the generation.
	paddleLaunchFamily
)

// families is who a process of framework f with per-node launcher l, of
// a node of role, is given variables of. A scheduler node is MindSpore's
// alone: no other framework has one, and a worker's variables there would
// make it a second rank 0.
func families(f Framework, l Launcher, role membership.Role) family {
	if l == PaddleLaunch {
		return ours | paddleLaunchFamily
	}
	if role == membership.RoleScheduler {
		return ours | mindsporeFamily
	}
	switch f {
	case PyTorch:
		return ours | torchFamily
	case Paddle:
		return ours | paddleFamily
	case MindSpore:
		return ours | mindsporeFamily
	}
	return ours | torchFamily | paddleFamily | mindsporeFamily
}
