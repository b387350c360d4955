package trainerenv

import (
	"fmt"
	"strings"
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

// families is who a process of framework f with per-node launcher l is
// given variables of.
func families(f Framework, l Launcher) family {
	if l == PaddleLaunch {
		return ours | paddleLaunchFamily
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
