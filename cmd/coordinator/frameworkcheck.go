package main

import (
	"context"
	"fmt"
	"os/exec"
	"strconv"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/trainerenv"
)

// frameworkPackage is what a named framework needs of the command's
// Python: the module the training script imports, the distributions that
// install it, and the oldest version whose launcher contract the
// project's tables hold (docs/frameworks.md).
type frameworkPackage struct {
	module string
	dists  []string
	oldest string
}

var frameworkPackages = map[trainerenv.Framework]frameworkPackage{
	// Debian's python3-torch, the oldest the tests run.
	trainerenv.PyTorch: {module: "torch", dists: []string{"torch"}, oldest: "1.13"},
	// paddle.distributed.launch's collective and ps controllers as 3.x
	// has them.
	trainerenv.Paddle: {module: "paddle", dists: []string{"paddlepaddle", "paddlepaddle-gpu"}, oldest: "3.0"},
	// msrun's dynamic cluster (MS_ROLE, MS_SCHED_HOST, MS_NODE_ID).
	trainerenv.MindSpore: {module: "mindspore", dists: []string{"mindspore"}, oldest: "2.3"},
}

// frameworkProbe prints, for module and its distributions (argv), the
// installed version, "missing" when the module cannot be found, or
// "unknown" when it can but no distribution says its version (a source
// tree on PYTHONPATH). It imports nothing of the framework: a probe of
// torch must not take torch's seconds.
const frameworkProbe = `import importlib.metadata as m, importlib.util as u, sys
if u.find_spec(sys.argv[1]) is None:
    print("missing")
    sys.exit(0)
for d in sys.argv[2:]:
    try:
        print(m.version(d))
        sys.exit(0)
    except m.PackageNotFoundError:
        pass
print("unknown")
`

// checkFrameworkInstalled checks, for a named framework and a command run
// by a Python interpreter, that the interpreter has the framework at a
// version the project's tables hold: a job that would fail in every
// process at its first import, or be given another version's contract,
// says so in one line at start.
func checkFrameworkInstalled(ctx context.Context, fw trainerenv.Framework, command []string) error {
	pkg, ok := frameworkPackages[fw]
	if !ok || len(command) == 0 || !guard.IsPython(command[0]) {
		return nil
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	out, err := exec.CommandContext(ctx, command[0], append([]string{"-c", frameworkProbe, pkg.module}, pkg.dists...)...).Output()
	if err != nil {
		return nil // the interpreter cannot run here: the generation's start says why
	}
	switch version := strings.TrimSpace(string(out)); {
	case version == "missing":
		return fmt.Errorf("--framework %s: %s cannot import %s: install %s %s or later for it", fw, command[0], pkg.module, pkg.dists[0], pkg.oldest)
	case version == "unknown":
		return nil
	case olderThan(version, pkg.oldest):
		return fmt.Errorf("--framework %s: %s has %s %s; this coordinator needs %s or later", fw, command[0], pkg.dists[0], version, pkg.oldest)
	}
	return nil
}

// olderThan compares a package version's leading numbers ("2.15.0+cu132",
// "1.13.0a0") with oldest's ("1.13"); a version with none is not older.
func olderThan(version, oldest string) bool {
	v, o := leadingNumbers(version), leadingNumbers(oldest)
	if len(v) == 0 {
		return false
	}
	for i, want := range o {
		have := 0 // a part left out is 0: "3" is "3.0"
		if i < len(v) {
			have = v[i]
		}
		if have != want {
			return have < want
		}
	}
	return false
}

// leadingNumbers is version's dot-separated numbers up to the first part
// that is not one (each part's leading digits: "0a0" is 0).
func leadingNumbers(version string) []int {
	var out []int
	for part := range strings.SplitSeq(version, ".") {
		digits := part
		if i := strings.IndexFunc(part, func(r rune) bool { return r < '0' || r > '9' }); i >= 0 {
			digits = part[:i]
		}
		n, err := strconv.Atoi(digits)
		if err != nil {
			break
		}
		out = append(out, n)
		if len(digits) < len(part) {
			break
		}
	}
	return out
}
