//go:build !sidecaronly

package main

import (
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every flag of every command, hidden ones included, refuses a bad value
// in one line that names the flag, with the exit code of a usage error,
// and in the command line's own words: never a parser's ("strconv.ParseInt:
// parsing "abc": invalid syntax", "time: invalid duration"). The walk
// finds the flags itself, so a flag added later is tried too, with a bad
// value for its type; a string flag is tried unless any value is valid
// for it (anyValue).
func TestEveryFlagRefusesABadValueInOneLine(t *testing.T) {
	root := newRootCommand(func(string) (string, bool) { return "", false })
	root.InitDefaultVersionFlag() // as Execute adds them
	tried, walked := 0, map[string]bool{}
	for _, c := range commandTree(root) {
		walked[c.Name()] = true
		if !c.DisableFlagParsing { // a command that parses its own has its own
			c.InitDefaultHelpFlag()
		}
		c.Flags().VisitAll(func(f *pflag.Flag) {
			if _, ok := anyValue[f.Name]; ok && isStringType(f.Value.Type()) {
				return
			}
			for _, bad := range badValues(f.Value.Type()) {
				args := append(strings.Fields(c.CommandPath())[1:], "--"+f.Name+"="+bad)
				tried++
				t.Run(strings.Join(args, " "), func(t *testing.T) {
					code, stdout, stderr := runCLI(t, nil, args...)
					assert.Equal(t, 2, code, "the exit code of a usage error: %s", stderr)
					assert.Empty(t, stdout)
					assert.Equal(t, 1, strings.Count(stderr, "\n"), "one line: %q", stderr)
					assert.True(t, namesFlag(stderr, f), "names --%s: %q", f.Name, stderr)
					for _, p := range parserPhrases {
						assert.NotContains(t, stderr, p, "a parser's words")
					}
				})
			}
		})
	}
	// The walk walks the tree: the commands, hidden ones too, and their
	// flags.
	for _, name := range []string{"run", "serve", "sidecar", "scale", "status", "etcd", "guard", "fence-watch", "commit", "beat"} {
		assert.True(t, walked[name], "walked %s", name)
	}
	require.Greater(t, tried, 150, "bad values tried")
}

// anyValue are the string flags that take any value, and why: no value of
// theirs is bad.
var anyValue = map[string]string{
	"data-dir":              "a directory, created if missing",
	"log-dir":               "a directory, created if missing",
	"state-dir":             "a directory, created if missing",
	"out":                   "a directory, created if missing",
	"user":                  "an etcd user's name, whatever etcd holds",
	"name":                  "an etcd member's name, any string",
	"initial-cluster-token": "any token",
	"marker":                "the guard's marker, any string",
	"id":                    "serve's name in the election, any string",
}

// parserPhrases are what Go's parsers say of a bad value, which the
// command line words itself.
var parserPhrases = []string{"strconv.", "parsing ", "invalid syntax", "time: ", "invalid duration", "invalid argument",
	"parse error", "out of range", "missing unit", "unknown unit", "bare \"", "ParseInt", "ParseBool", "ParseFloat"}

// badValues are values no flag of type typ takes.
func badValues(typ string) []string {
	switch typ {
	case "bool":
		return []string{"maybe"}
	case "int", "int8", "int16", "int32", "int64", "count":
		return []string{"abc", "1.5", "99999999999999999999"}
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return []string{"abc", "-1"}
	case "float32", "float64":
		return []string{"abc"}
	case "duration":
		return []string{"nonsense", "5"}
	case "stringSlice":
		return []string{`"unclosed`, badString}
	}
	return []string{badString} // a string, a list of them, a value of the command's own type
}

// badString is a string no checked string flag takes: not a name, a
// number, a duration, an address, a path that exists or a choice.
const badString = "bad\tvalue"

func isStringType(typ string) bool {
	return typ == "string" || typ == "stringSlice" || typ == "stringArray"
}

// namesFlag reports whether the message names the flag, by its name or
// its shorthand.
func namesFlag(msg string, f *pflag.Flag) bool {
	return strings.Contains(msg, "--"+f.Name) || (f.Shorthand != "" && strings.Contains(msg, "-"+f.Shorthand+" "))
}

// commandTree is root and every command below it.
func commandTree(root *cobra.Command) []*cobra.Command {
	out := []*cobra.Command{root}
	for _, c := range root.Commands() {
		out = append(out, commandTree(c)...)
	}
	return out
}
