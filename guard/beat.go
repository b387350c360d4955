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
	fs := flag.NewFlagSet("beat", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	step := fs.Int64("step", 0, "the step the trainer is at")
	if err := fs.Parse(args); err != nil || fs.NArg() > 0 || *step < 0 {
		fmt.Fprintln(stderr, "coordinator beat: usage: beat [--step N] (N a step number, 0 or more)")
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
	if *step > 0 {
		p.word(offUserStep).Store(*step)
	}
	p.word(offLastActivity).Store(now)
	p.word(offLastStep).Store(now)
	p.word(offSteps).Add(1)
	return 0
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
