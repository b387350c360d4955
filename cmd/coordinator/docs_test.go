//go:build !sidecaronly

package main

import (
	"fmt"
	"os"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The docs' command lines work as written: every `coordinator` command line
// in a shell or console block of README.md, docs/*.md and examples/*/*.md
// names a command that exists and flags that parse, every `make TARGET` is
// a target of the Makefile, and every path of the repository a command
// names is there. Nothing is run.
func TestDocCommandsWorkAsWritten(t *testing.T) {
	root := filepath.Join("..", "..")
	targets, err := makeTargets(filepath.Join(root, "Makefile"))
	require.NoError(t, err)
	var pages []string
	for _, pattern := range []string{"README.md", "docs/*.md", "examples/*/*.md"} {
		matches, err := filepath.Glob(filepath.Join(root, pattern))
		require.NoError(t, err)
		pages = append(pages, matches...)
	}
	require.NotEmpty(t, pages)
	exists := func(p string) bool {
		_, err := os.Stat(filepath.Join(root, p))
		return err == nil
	}
	var total docCheck
	for _, page := range pages {
		text, err := os.ReadFile(page)
		require.NoError(t, err)
		name, _ := filepath.Rel(root, page)
		got := checkDoc(name, string(text), targets, exists)
		for _, p := range got.problems {
			t.Error(p)
		}
		t.Logf("%s: %d coordinator command lines, %d make targets", name, got.coordinatorLines, got.makeTargets)
		total.coordinatorLines += got.coordinatorLines
		total.makeTargets += got.makeTargets
	}
	// The walkthrough, the set-up and the references have dozens: a
	// count this low means the extraction no longer finds them.
	assert.GreaterOrEqual(t, total.coordinatorLines, 12, "command lines found in the docs")
	assert.GreaterOrEqual(t, total.makeTargets, 10, "make targets found in the docs")
}

// The checker finds what it is for.
func TestDocCheckFindsBrokenCommands(t *testing.T) {
	targets := []string{"test", "build", "bench-restart", "bench-fence"}
	exists := func(p string) bool { return p == "testdata/toytrainer.sh" }
	for _, tc := range []struct {
		name    string
		doc     string
		problem string // "" for none
	}{
		{"a good line", "```sh\ncoordinator status --etcd-endpoints http://127.0.0.1:2379 --job default -o json\n```\n", ""},
		{"an unknown flag", "```sh\ncoordinator status --etcd-endpoints E --job default --colour\n```\n", "unknown flag: --colour"},
		{"an unknown command", "```sh\ncoordinator stats --job default\n```\n", `unknown command "stats"`},
		{"a value that does not parse", "```sh\nbin/coordinator sidecar --ttl soon -- true\n```\n", `invalid argument "soon"`},
		{"PaddlePaddle's spellings", "```sh\ncoordinator scale --elastic_server=127.0.0.1:2379 --np=4 --job_id=XXXXXX --wait\n```\n", ""},
		{"the trainer's flags are its own", "```sh\ngo run ./cmd/coordinator run --np 2 -- testdata/toytrainer.sh --colour\n```\n", ""},
		{"flags end at the training command", "```sh\ncoordinator sidecar --job j python train.py --colour\n```\n", ""},
		{"a missing path", "```sh\ngo run ./cmd/coordinator run --np 2 -- testdata/nosuch.sh\n```\n", "testdata/nosuch.sh does not exist"},
		{"a console prompt", "```console\n$ coordinator jobs --etcd-endpoints E -o yaml --bad\ncoordinator jobs: output\n```\n", "unknown flag: --bad"},
		{"output is not a command", "```console\n$ true\ncoordinator run: generation 2 running\n```\n", ""},
		{"an alias", "```console\n$ alias c='go run ./cmd/coordinator'\n$ c scale --job default --np 3 --wiat\n```\n", "unknown flag: --wiat"},
		{"a continuation", "```sh\ncoordinator etcd --data-dir d \\\n    --listen-client-urls https://0.0.0.0:2379 --cert-flie f\n```\n", "unknown flag: --cert-flie"},
		{"after an operator", "```sh\ntrue && coordinator certs --out certs/ --namspace x | cat\n```\n", "unknown flag: --namspace"},
		{"a redirection", "```sh\ncoordinator jobs --etcd-endpoints E >jobs.txt\n```\n", ""},
		{"variables before the command", "```sh\nELASTIC_NP=2 coordinator run -- python train.py\n```\n", ""},
		{"a comment", "```sh\ncoordinator version   # --no-such-flag\n```\n", ""},
		{"a make target in a block", "```sh\nmake tset\n```\n", `make target "tset"`},
		{"a make target in prose", "Run `make bench-restrat` to measure.\n", `make target "bench-restrat"`},
		{"a make target across lines", "Run `make\nbench-fence` to measure.\n", ""},
		{"make with variables", "`RESTART_BEFORE=old make bench-restart RESTART_RUNS=3`\n", ""},
		{"a glob of targets", "`make bench-*`\n", ""},
		{"other languages are not commands", "```yaml\ncommand: [coordinator, nosuch]\n```\n", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := checkDoc("doc.md", tc.doc, targets, exists)
			if tc.problem == "" {
				assert.Empty(t, got.problems)
				return
			}
			require.Len(t, got.problems, 1)
			assert.Contains(t, got.problems[0], tc.problem)
		})
	}
}

// docCheck is what checkDoc found in one page.
type docCheck struct {
	problems         []string
	coordinatorLines int
	makeTargets      int
}

// shellLanguages are the fenced blocks whose lines are commands. In a
// console block only the lines after a "$ " prompt are.
var shellLanguages = map[string]bool{"sh": true, "bash": true, "shell": true, "console": true}

// repoPaths are the prefixes of the repository's paths that a command line
// may name and a reader must find.
var repoPaths = []string{"deploy/", "testdata/", "examples/"}

// checkDoc checks the command lines of one markdown page.
func checkDoc(name, text string, targets []string, exists func(string) bool) docCheck {
	var c docCheck
	aliases := map[string][]string{}
	problem := func(line int, format string, args ...any) {
		c.problems = append(c.problems, fmt.Sprintf("%s:%d: %s", name, line, fmt.Sprintf(format, args...)))
	}
	checkSegment := func(line int, words []string) {
		words = dropAssignments(words)
		if len(words) == 0 {
			return
		}
		if exp, ok := aliases[words[0]]; ok {
			words = append(slices.Clone(exp), words[1:]...)
		}
		for _, w := range words {
			if slices.ContainsFunc(repoPaths, func(p string) bool { return strings.HasPrefix(w, p) }) && !exists(strings.TrimRight(w, "/")) {
				problem(line, "%s does not exist", w)
			}
		}
		switch {
		case words[0] == "alias" && len(words) == 2:
			if n, v, ok := strings.Cut(words[1], "="); ok {
				if exp, err := shellSegments(v); err == nil && len(exp) == 1 {
					aliases[n] = exp[0]
				}
			}
		case words[0] == "make":
			c.makeTargets += checkMake(words[1:], targets, func(format string, args ...any) { problem(line, format, args...) })
		default:
			if args, ok := coordinatorArgs(words); ok {
				c.coordinatorLines++
				if err := parseCommandLine(args); err != nil {
					problem(line, "%s: %v", strings.Join(words, " "), err)
				}
			}
		}
	}
	checkLine := func(line int, cmdline string) {
		segs, err := shellSegments(cmdline)
		if err != nil {
			problem(line, "%q: %v", cmdline, err)
			return
		}
		for _, s := range segs {
			checkSegment(line, s)
		}
	}

	lines := strings.Split(text, "\n")
	var prose strings.Builder
	proseLine := []int{} // the page's line of each line of prose
	lang, fenced := "", false
	for i := 0; i < len(lines); i++ {
		l := lines[i]
		if strings.HasPrefix(strings.TrimSpace(l), "```") {
			if fenced {
				fenced = false
			} else {
				fenced, lang = true, strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(l), "```"))
			}
			prose.WriteString("\n")
			proseLine = append(proseLine, i+1)
			continue
		}
		if !fenced {
			prose.WriteString(l + "\n")
			proseLine = append(proseLine, i+1)
			continue
		}
		if !shellLanguages[lang] {
			continue
		}
		start := i + 1
		cmdline := l
		if lang == "console" {
			var ok bool
			if cmdline, ok = strings.CutPrefix(l, "$ "); !ok {
				continue
			}
		}
		// A backslash at the end of a line continues the command.
		for strings.HasSuffix(cmdline, "\\") && i+1 < len(lines) {
			i++
			cmdline = strings.TrimSuffix(cmdline, "\\") + " " + lines[i]
		}
		checkLine(start, cmdline)
	}

	// `make TARGET` in the prose's code spans, which may wrap.
	for _, m := range codeSpan.FindAllStringIndex(prose.String(), -1) {
		span := prose.String()[m[0]+1 : m[1]-1]
		line := proseLine[strings.Count(prose.String()[:m[0]], "\n")]
		segs, err := shellSegments(strings.Join(strings.Fields(span), " "))
		if err != nil {
			continue // not a command: prose in backticks
		}
		for _, s := range segs {
			if s = dropAssignments(s); len(s) > 0 && s[0] == "make" {
				checkSegment(line, s)
			}
		}
	}
	return c
}

var codeSpan = regexp.MustCompile("`[^`]+`")

// dropAssignments drops the variables set before a command (A=1 B=2 cmd).
func dropAssignments(words []string) []string {
	for len(words) > 0 && assignment.MatchString(words[0]) {
		words = words[1:]
	}
	return words
}

var assignment = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*=`)

// coordinatorArgs reports whether words run the coordinator (coordinator,
// bin/coordinator, /elastic/coordinator, "$ELASTIC_COORDINATOR", go run
// ./cmd/coordinator), and the arguments it is given up to the training
// command's `--`.
func coordinatorArgs(words []string) ([]string, bool) {
	var args []string
	switch {
	case path.Base(words[0]) == "coordinator" || words[0] == "$ELASTIC_COORDINATOR":
		args = words[1:]
	case len(words) >= 3 && words[0] == "go" && words[1] == "run" && strings.TrimSuffix(words[2], "/") == "./cmd/coordinator":
		args = words[3:]
	default:
		return nil, false
	}
	if i := slices.Index(args, "--"); i >= 0 {
		args = args[:i]
	}
	return args, true
}

// parseCommandLine finds the command args name in the real command tree
// and parses its flags, running nothing.
func parseCommandLine(args []string) error {
	root := newRootCommand(func(string) (string, bool) { return "", false })
	cmd, rest, err := root.Find(args)
	if err != nil {
		return err
	}
	if cmd == root && len(args) > 0 && !strings.HasPrefix(args[0], "-") {
		return fmt.Errorf("unknown command %q", args[0])
	}
	cmd.InitDefaultHelpFlag()
	if err := cmd.ParseFlags(rest); err != nil {
		return err
	}
	if cmd.DisableFlagParsing {
		return nil
	}
	return cmd.ValidateArgs(cmd.Flags().Args())
}

// checkMake checks make's arguments: every target is the Makefile's, and a
// glob (bench-*) matches one at least. It returns the targets checked.
func checkMake(args []string, targets []string, problem func(string, ...any)) int {
	n := 0
	for _, a := range args {
		if strings.HasPrefix(a, "-") || assignment.MatchString(a) {
			continue
		}
		n++
		if !slices.ContainsFunc(targets, func(t string) bool { ok, _ := path.Match(a, t); return ok }) {
			problem("make target %q is not in the Makefile", a)
		}
	}
	return n
}

// makeTargets are the Makefile's targets: the names before a rule's colon.
func makeTargets(makefile string) ([]string, error) {
	b, err := os.ReadFile(makefile)
	if err != nil {
		return nil, err
	}
	var targets []string
	for _, m := range makeRule.FindAllStringSubmatch(string(b), -1) {
		for _, t := range strings.Fields(m[1]) {
			if !strings.HasPrefix(t, ".") && !strings.Contains(t, "$") {
				targets = append(targets, t)
			}
		}
	}
	return targets, nil
}

var makeRule = regexp.MustCompile(`(?m)^([A-Za-z0-9_.$()/ -]+):(?:[^=]|$)`)

// shellSegments splits a command line as a shell would: words, with quotes
// and escapes removed, a comment dropped, a $(...) kept as one word, and
// the line cut into simple commands at |, ||, &&, ;, & and parentheses. A
// redirection and its file are dropped.
func shellSegments(line string) ([][]string, error) {
	var (
		segs    [][]string
		words   []string
		word    strings.Builder
		inWord  bool
		skipNxt bool // the next word is a redirection's file
	)
	endWord := func() {
		if !inWord {
			return
		}
		if skipNxt {
			skipNxt = false
		} else {
			words = append(words, word.String())
		}
		word.Reset()
		inWord = false
	}
	endSeg := func() {
		endWord()
		if len(words) > 0 {
			segs = append(segs, words)
		}
		words = nil
	}
	rs := []rune(line)
	for i := 0; i < len(rs); i++ {
		r := rs[i]
		switch {
		case r == ' ' || r == '\t':
			endWord()
		case r == '#' && !inWord:
			i = len(rs)
		case r == '\\':
			if i+1 < len(rs) {
				i++
				word.WriteRune(rs[i])
			}
			inWord = true
		case r == '\'':
			j := slices.Index(rs[i+1:], '\'')
			if j < 0 {
				return nil, fmt.Errorf("unterminated '")
			}
			word.WriteString(string(rs[i+1 : i+1+j]))
			i += j + 1
			inWord = true
		case r == '"':
			i++
			for ; i < len(rs) && rs[i] != '"'; i++ {
				if rs[i] == '\\' && i+1 < len(rs) && strings.ContainsRune(`"\$`+"`", rs[i+1]) {
					i++
				}
				word.WriteRune(rs[i])
			}
			if i == len(rs) {
				return nil, fmt.Errorf(`unterminated "`)
			}
			inWord = true
		case r == '$' && i+1 < len(rs) && rs[i+1] == '(':
			depth, j := 0, i
			for ; j < len(rs); j++ {
				if rs[j] == '(' {
					depth++
				} else if rs[j] == ')' {
					if depth--; depth == 0 {
						break
					}
				}
			}
			if j == len(rs) {
				return nil, fmt.Errorf("unterminated $(")
			}
			word.WriteString(string(rs[i : j+1]))
			i = j
			inWord = true
		case r == '>' || r == '<':
			if inWord && strings.Trim(word.String(), "0123456789") == "" {
				word.Reset() // a file descriptor: 2>
				inWord = false
			}
			endWord()
			for i+1 < len(rs) && (rs[i+1] == '>' || rs[i+1] == '&') {
				i++
			}
			skipNxt = true
			if i+1 < len(rs) && rs[i+1] >= '0' && rs[i+1] <= '9' && rs[i] == '&' {
				i++ // 2>&1
				skipNxt = false
			}
		case r == '|' || r == '&' || r == ';' || r == '(' || r == ')':
			endSeg()
			if i+1 < len(rs) && rs[i+1] == r && (r == '|' || r == '&') {
				i++
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	endSeg()
	return segs, nil
}
