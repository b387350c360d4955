package integration

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/membership"
)

// readmeCommand is a command of the README's walkthrough and the output
// the README shows under it: in its console block, or, for a command whose
// effect is seen in `run`'s output, the plain block after it.
type readmeCommand struct {
	line   string
	output []string
}

// readmeWalkthrough reads the commands of the README's walkthrough, in
// order.
func readmeWalkthrough(t *testing.T) []readmeCommand {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(repoRoot, "README.md"))
	require.NoError(t, err)
	text := string(data)
	start := strings.Index(text, "\n## Walkthrough\n")
	require.Positive(t, start, "the README has a walkthrough")
	text = text[start+1:]
	if end := strings.Index(text[1:], "\n## "); end > 0 {
		text = text[:end+1]
	}
	var out []readmeCommand
	blocks := regexp.MustCompile("(?s)```(console)?\n(.*?)```").FindAllStringSubmatch(text, -1)
	for _, b := range blocks {
		lines := strings.Split(strings.TrimSuffix(b[2], "\n"), "\n")
		if b[1] != "console" {
			require.NotEmpty(t, out, "a plain block follows a command")
			out[len(out)-1].output = append(out[len(out)-1].output, lines...)
			continue
		}
		for _, l := range lines {
			if cmd, ok := strings.CutPrefix(l, "$ "); ok {
				out = append(out, readmeCommand{line: cmd})
			} else {
				require.NotEmpty(t, out, "output follows a command")
				out[len(out)-1].output = append(out[len(out)-1].output, l)
			}
		}
	}
	return out
}

var (
	// lostList is the list of causes of a goodput line: which causes
	// lost time varies from run to run.
	lostList = regexp.MustCompile(`\(lost [^)]*\)`)
	// numberish are the numbers, durations, ratios and times that differ
	// from run to run.
	numberish = regexp.MustCompile(`\d+(?:\.\d+)?(?:ms|µs|s|m|h|d|%)?`)
	hashes    = regexp.MustCompile(`#+`)
)

// shape is a line of output with what changes from run to run taken out:
// its numbers, the causes of its lost time, its spacing.
func shape(line string) string {
	line = lostList.ReplaceAllString(line, "(lost …)")
	line = hashes.ReplaceAllString(numberish.ReplaceAllString(line, "#"), "#")
	return strings.Join(strings.Fields(line), " ")
}

func shapes(lines []string) []string {
	var out []string
	for _, l := range lines {
		if s := shape(l); s != "" {
			out = append(out, s)
		}
	}
	return out
}

// hasShapes reports whether every line of want but "..." has the shape of
// some line of got; and says which does not.
func hasShapes(got, want []string) (bool, string) {
	have := map[string]bool{}
	for _, s := range shapes(got) {
		have[s] = true
	}
	for _, w := range want {
		if w == "..." || w == "[rank 0] step 1" {
			continue // elided
		}
		if !have[shape(w)] {
			return false, w
		}
	}
	return true, ""
}

// TestTheREADMEWalkthrough runs the README's walkthrough, its commands as
// written (but for the port etcd serves on), in its order, as a user at a
// terminal: what `run` prints after each command, and what `status`,
// `jobs` and `events` print, have the shape the README shows, line by line
// (the numbers, and which causes lost time, aside).
func TestTheREADMEWalkthrough(t *testing.T) {
	t.Parallel()
	port := freePort(t)
	fix := strings.NewReplacer("127.0.0.1:2379", "127.0.0.1:"+port, "bin/coordinator", binary)
	var r *localRun
	seen := 0 // how much of run's output the commands before saw
	runSaid := func(want []string) {
		t.Helper()
		for deadline := time.Now().Add(90 * time.Second); ; {
			ok, missing := hasShapes(strings.Split(r.out.String()[seen:], "\n"), want)
			if ok {
				break
			}
			require.True(t, time.Now().Before(deadline), "run never printed a line like %q", missing)
			time.Sleep(50 * time.Millisecond) // run's output grows
		}
		seen = len(r.out.String())
	}
	alias := ""
	for _, c := range readmeWalkthrough(t) {
		line := c.line
		if alias != "" {
			line = strings.Replace(line, "c ", alias+" ", 1)
		}
		switch {
		case line == "make build":
			// The tests built it.
		case strings.Contains(line, "bin/coordinator run "):
			env, rest, _ := strings.Cut(line, " bin/coordinator run ")
			args, command, ok := strings.Cut(fix.Replace(rest), " -- ")
			require.True(t, ok, "run's command after --: %s", line)
			r = startRun(t, strings.Fields(args), strings.Fields(command), strings.Fields(env)...)
			runSaid(c.output)
			r.status("default", "running with its spare", func(s membership.Status) bool {
				return s.Phase == membership.JobRunning && s.Generation == 1
			})
		case strings.HasPrefix(line, "kill "):
			// The user looks up the pid once status shows it.
			lookup := regexp.MustCompile(`\$\((.*)\)`).FindStringSubmatch(line)
			require.NotNil(t, lookup, "a kill of a pid status gives: %s", line)
			var said string
			for deadline := time.Now().Add(time.Minute); ; {
				cmd := exec.Command("sh", "-c", fix.Replace(lookup[1]))
				cmd.Dir = repoRoot
				out, err := cmd.CombinedOutput()
				said = strings.TrimSpace(string(out))
				if err == nil && regexp.MustCompile(`^\d+$`).MatchString(said) {
					break
				}
				require.True(t, time.Now().Before(deadline), "status never gave the pid of %s: %q", lookup[1], said)
				time.Sleep(100 * time.Millisecond) // as a user looks again
			}
			cmd := exec.Command("sh", "-c", fix.Replace(line))
			cmd.Dir = repoRoot
			out, err := cmd.CombinedOutput()
			require.NoError(t, err, "%s: %s", line, out)
			runSaid(c.output)
		case strings.HasPrefix(line, "alias c="):
			alias = strings.Trim(strings.TrimPrefix(line, "alias c="), "'")
		case strings.HasPrefix(line, "bin/coordinator "):
			args := strings.Fields(fix.Replace(strings.TrimPrefix(line, "bin/coordinator ")))
			plot := ""
			for i, a := range args {
				if i > 0 && args[i-1] == "--plot" {
					plot = a
					args[i] = filepath.Join(t.TempDir(), a)
				}
			}
			looks := args[0] == "status" || args[0] == "jobs"
			var stdout, stderr string
			require.Eventually(t, func() bool {
				var code int
				code, stdout, stderr = cli(t, nil, args...)
				if plot != "" {
					stdout = strings.ReplaceAll(stdout, args[len(args)-1], plot)
				}
				if code != 0 {
					return false
				}
				if !looks {
					return true
				}
				// What a command that looks shows is what is there once
				// the job gets there: asked again until it is.
				return assert.ObjectsAreEqual(shapes(c.output), shapes(strings.Split(stdout, "\n")))
			}, 60*time.Second, 200*time.Millisecond, "%s\nthe README shows:\n%s\nit printed:\n%s%s",
				line, strings.Join(c.output, "\n"), &stdout, &stderr)
			if !looks {
				want := c.output
				if args[0] == "scale" && len(want) > 2 {
					// What --wait sees on the way depends on when it looks.
					want = []string{want[0], want[len(want)-1]}
				}
				ok, missing := hasShapes(strings.Split(stdout, "\n"), want)
				assert.True(t, ok, "%s printed no line like %q:\n%s", line, missing, stdout)
			}
		default:
			t.Fatalf("the README's walkthrough has a command this test does not know: %s", c.line)
		}
	}
	require.NotNil(t, r, "the walkthrough ran a job")
}
