package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
)

// A hang stop writes every rank's Python stack to the rank's output
// (faulthandler's dump: a line "Thread 0x... (most recent call first):",
// then a line a frame, innermost first, `  File "PATH", line N in FUNC`).
// run --log-dir keeps a rank's output in DIR/NODE/rank-R.log, each
// generation's after a line that names it: "==== generation G: worker rank
// R of W (node rank N, local rank L), TIME ====".

// stackMark is in the first line of every thread's dump.
const stackMark = "most recent call first"

var (
	headerLine = regexp.MustCompile(`^==== generation (\d+): \S+ rank (\d+) of (\d+)\b`)
	frameLine  = regexp.MustCompile(`^\s*File "([^"]*)", line \d+ in (\S+)`)
)

// rankOutput is one rank's output in one generation.
type rankOutput struct {
	gen   string
	rank  int
	lines []string
}

// splitRankLog splits a rank's log into its generations' outputs. Lines
// before the first header belong to no generation and are left out.
func splitRankLog(data string) []rankOutput {
	var out []rankOutput
	for _, line := range strings.Split(data, "\n") {
		if m := headerLine.FindStringSubmatch(line); m != nil {
			rank, _ := strconv.Atoi(m[2])
			out = append(out, rankOutput{gen: m[1], rank: rank})
			continue
		}
		if len(out) > 0 {
			out[len(out)-1].lines = append(out[len(out)-1].lines, line)
		}
	}
	return out
}

// stack is what a rank's output in a generation shows of a stack dump:
// whether there is one, and the function of the script its main thread
// was in (the innermost of its frames in the script); "" when none.
type stack struct {
	dumped bool
	in     string
}

// frame is one line of a thread's dump.
type frame struct{ file, function string }

// stackOf reads a stack dump out of a rank's output. faulthandler writes
// every thread, the one that took the signal last ("Current thread"); the
// main thread is the one whose frames end in the script's <module>.
func stackOf(lines []string, script string) stack {
	var threads [][]frame
	current := -1
	for _, line := range lines {
		if strings.Contains(line, stackMark) {
			if strings.HasPrefix(strings.TrimSpace(line), "Current thread") && current < 0 {
				current = len(threads)
			}
			threads = append(threads, nil)
			continue
		}
		if m := frameLine.FindStringSubmatch(line); m != nil && len(threads) > 0 {
			t := &threads[len(threads)-1]
			*t = append(*t, frame{file: filepath.Base(m[1]), function: m[2]})
		}
	}
	if len(threads) == 0 {
		return stack{}
	}
	name := filepath.Base(script)
	main := max(current, 0)
	for i, t := range threads {
		if slices.Contains(t, frame{file: name, function: "<module>"}) {
			main = i
			break
		}
	}
	s := stack{dumped: true}
	for _, f := range threads[main] {
		if f.file == name {
			s.in = f.function
			break
		}
	}
	return s
}

// stacksOf reads every rank log under dir and returns, for each rank of
// generation gen, what its output shows of a stack dump.
func stacksOf(dir, gen, script string) (map[int]stack, error) {
	paths, err := filepath.Glob(filepath.Join(dir, "*", "rank-*.log"))
	if err != nil {
		return nil, err
	}
	out := map[int]stack{}
	for _, path := range paths {
		data, err := os.ReadFile(path)
		if err != nil {
			return nil, err
		}
		for _, o := range splitRankLog(string(data)) {
			if o.gen != gen {
				continue
			}
			s := stackOf(o.lines, script)
			if prev, ok := out[o.rank]; ok && prev.dumped {
				continue
			}
			out[o.rank] = s
		}
	}
	return out, nil
}

// stackCheck is the verdict on one hang's stacks: every rank's stack is in
// its log, and the hung rank's names the function it hung in (want, when
// known).
type stackCheck struct {
	ok bool
	// in is the hung rank's innermost function in the script.
	in  string
	why string
}

func checkStacks(stacks map[int]stack, world, hung int, want string) stackCheck {
	var missing []string
	for r := range world {
		if !stacks[r].dumped {
			missing = append(missing, strconv.Itoa(r))
		}
	}
	c := stackCheck{in: stacks[hung].in}
	switch {
	case len(missing) == world:
		c.why = "no stack in any rank's log"
	case len(missing) > 0:
		c.why = fmt.Sprintf("no stack in the log of rank %s", strings.Join(missing, ", "))
	case want != "" && c.in == "":
		c.why = fmt.Sprintf("rank %d's stack has no frame of the script", hung)
	case want != "" && c.in != want:
		c.why = fmt.Sprintf("rank %d's stack is in %s, not %s", hung, c.in, want)
	default:
		c.ok = true
	}
	return c
}
