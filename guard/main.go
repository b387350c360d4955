package guard

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"syscall"
)

// ControlFD is the descriptor of the guard's end of its socket pair: the
// first of exec.Cmd.ExtraFiles.
const ControlFD = 3

// Main is the guard process's main: `coordinator guard --marker M
// [--cgroup auto|off] [--deadline-fd N]`, started by the launcher with its
// socket as descriptor 3 and, with --deadline-fd, its DeadlinePage as
// descriptor N, which the guard hands to the fence watchdog of each
// training process. It returns the exit code.
func Main(args []string, stdout, stderr io.Writer) int {
	var a guardArgs
	if err := a.parse(args); err != nil {
		fmt.Fprintln(stderr, usageLine("guard", err, "started by the sidecar only: "+guardUsage))
		return 2
	}
	// The training processes must not inherit the socket: the sidecar would
	// not see it close when the guard dies.
	syscall.CloseOnExec(ControlFD)
	control := os.NewFile(ControlFD, "guard-control")
	if control == nil {
		fmt.Fprintln(stderr, "coordinator guard: no control socket on descriptor "+strconv.Itoa(ControlFD))
		return 2
	}
	var deadline *os.File
	if a.deadlineFD > 0 {
		// Handed on to the watchdogs only, never to a training process.
		syscall.CloseOnExec(a.deadlineFD)
		view, err := openDeadlineView(a.deadlineFD)
		if err != nil {
			fmt.Fprintf(stderr, "coordinator guard: %v\n", err)
			return 2
		}
		view.close()
		deadline = os.NewFile(uintptr(a.deadlineFD), "elastic-deadline")
	}
	exe, err := os.Executable()
	if err != nil {
		exe = os.Args[0]
	}
	return Run(Config{Control: control, Stdout: stdout, Stderr: stderr, Cgroup: a.cgroup == "auto", Executable: exe, Marker: a.marker, Deadline: deadline})
}

// guardUsage is the guard's command line.
const guardUsage = "guard --marker M [--cgroup auto|off] [--deadline-fd N]"

// guardArgs are the guard's flags.
type guardArgs struct {
	marker, cgroup string
	deadlineFD     int
}

func (a *guardArgs) flags() *flag.FlagSet {
	fs := newFlags("guard")
	fs.StringVar(&a.marker, "marker", "", "marker set in the processes' environment")
	fs.StringVar(&a.cgroup, "cgroup", "auto", "auto: a cgroup v2 of its own where one is writable; off: none")
	fs.IntVar(&a.deadlineFD, "deadline-fd", 0, "descriptor of the sidecar's deadline page; 0: none, no fence watchdogs")
	return fs
}

// parse reads the guard's command line, or says what is wrong with it.
func (a *guardArgs) parse(args []string) error {
	if err := parseFlags(a.flags(), args); err != nil {
		return err
	}
	switch {
	case a.cgroup != "auto" && a.cgroup != "off":
		return fmt.Errorf("--cgroup %q: want auto or off", a.cgroup)
	case a.deadlineFD < 0 || a.deadlineFD == ControlFD:
		return fmt.Errorf("--deadline-fd %d: want a descriptor other than %d, or 0 for none", a.deadlineFD, ControlFD)
	case a.marker == "":
		return errors.New("--marker is required")
	}
	return nil
}

// CommitMain is `coordinator commit [--check] [SRC DST]`: a shell script's
// fenced checkpoint commit, asked of the process's fence watchdog, or of
// its guard when the watchdog cannot be reached. It returns 0 when SRC was
// renamed to DST (or, with --check, would be), 1 when refused, 2 for a
// usage error.
func CommitMain(args []string, getenv func(string) string, stderr io.Writer) int {
	var a commitArgs
	fs := a.flags()
	help := "usage: coordinator commit SRC DST | coordinator commit --check\n" +
		"renames the checkpoint SRC to DST only while this training process's generation is current\n" +
		"and its node holds its lease (ELASTIC_WATCHDOG_SOCKET, ELASTIC_FENCE_SOCKET, ELASTIC_GENERATION, set by the sidecar)"
	if err := parseFlags(fs, args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			fmt.Fprintln(stderr, help)
			return 0
		}
		fmt.Fprintf(stderr, "coordinator commit: %v (see 'coordinator commit --help')\n", err)
		return 2
	}
	want := 2
	if a.check {
		want = 0
	}
	if fs.NArg() != want {
		fmt.Fprintln(stderr, "coordinator commit: want SRC and DST, or --check alone (see 'coordinator commit --help')")
		return 2
	}
	fence := FenceFromEnv(getenv)
	var gen int64
	if fence.Guard != "" {
		var err error
		// The generation the trainer was given: trainerenv.ElasticGeneration,
		// which the guard cannot import, since it runs before the heavy
		// packages initialise and trainerenv imports etcd's client through
		// membership.
		if gen, err = strconv.ParseInt(getenv("ELASTIC_GENERATION"), 10, 64); err != nil || gen < 1 {
			fmt.Fprintln(stderr, "coordinator commit: ELASTIC_GENERATION is not a generation; run it from a training process")
			return 2
		}
	}
	var err error
	if a.check {
		err = fence.Check(gen)
	} else {
		err = fence.Commit(gen, fs.Arg(0), fs.Arg(1))
	}
	if err != nil {
		fmt.Fprintf(stderr, "coordinator commit: %v\n", err)
		return 1
	}
	return 0
}

// commitArgs are commit's flags.
type commitArgs struct{ check bool }

func (a *commitArgs) flags() *flag.FlagSet {
	fs := newFlags("commit")
	fs.BoolVar(&a.check, "check", false, "only ask whether this process may still commit")
	return fs
}
