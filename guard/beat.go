package guard

import (
	"flag"
	"fmt"
	"io"
	"os"
	"strconv"
	"strings"

	"golang.org/x/sys/unix"
)

// BeatMain is `coordinator beat [--step N]`: a progress event of the
// training process that runs it, for a trainer written as a shell script
// (a Python trainer calls elastic.beat()). It maps the page named by
// ELASTIC_PROGRESS_FD, which the shell inherited from the guard, counts a
// step and, with --step, names it. Outside a sidecar (no page) it does
// nothing and succeeds, so that the script runs on its own too. It returns
// the exit code.
func BeatMain(args []string, getenv func(string) string, stderr io.Writer) int {
	var a beatArgs
	if err := a.parse(args); err != nil {
		fmt.Fprintln(stderr, usageLine("beat", err, "usage: beat [--step N]"))
		return 2
	}
	v := getenv(EnvProgressFD)
	if v == "" {
		return 0
	}
	fd, err := strconv.Atoi(v)
	if err != nil || fd < 3 {
		return 0 // not a page this process could have been given
	}
	mem, ok := mapInheritedPage(fd)
	if !ok {
		return 0
	}
	defer unix.Munmap(mem)
	p := &progressPage{fd: -1, mem: mem}
	now := MonoNow()
	if a.step > 0 {
		p.word(offUserStep).Store(a.step)
	}
	p.word(offLastActivity).Store(now)
	p.word(offLastStep).Store(now)
	p.word(offSteps).Add(1)
	return 0
}

// beatArgs are beat's flags.
type beatArgs struct{ step int64 }

func (a *beatArgs) flags() *flag.FlagSet {
	fs := newFlags("beat")
	fs.Int64Var(&a.step, "step", 0, "the step the trainer is at")
	return fs
}

// parse reads beat's command line, or says what is wrong with it.
func (a *beatArgs) parse(args []string) error {
	fs := a.flags()
	if err := parseFlags(fs, args); err != nil {
		return err
	}
	switch {
	case a.step < 0:
		return fmt.Errorf("--step %d: want a step number, 0 or more", a.step)
	case fs.NArg() > 0:
		return fmt.Errorf("%q: beat takes no arguments", fs.Arg(0))
	}
	return nil
}

// mapInheritedPage maps descriptor fd when it is a progress page: a memfd
// of the page's size that starts with the magic. Anything else (the
// descriptor number reused for a file of the user's) is left untouched.
func mapInheritedPage(fd int) ([]byte, bool) {
	link, err := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
	if err != nil || !strings.HasPrefix(link, "/memfd:elastic-progress") {
		return nil, false
	}
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil || st.Size != pageSize {
		return nil, false
	}
	mem, err := unix.Mmap(fd, 0, pageSize, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	if err != nil {
		return nil, false
	}
	if string(mem[offMagic:offMagic+len(progressMagic)]) != progressMagic {
		_ = unix.Munmap(mem)
		return nil, false
	}
	return mem, true
}
