package guard

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"time"

	"github.com/elastictraining/coordinator/english"
)

// The guard's commands (guard, fence-watch, commit, beat) parse their own
// flags, before the rest of the binary initialises. The command line shows
// them in its help (Flags), and a bad value is worded as its other
// commands word theirs (parseFlags).

// Flags is the flag set of the guard's command name (guard, fence-watch,
// commit or beat), nil for another: what the command line's help shows of
// a command that parses its flags itself.
func Flags(name string) *flag.FlagSet {
	switch name {
	case "guard":
		return new(guardArgs).flags()
	case "fence-watch":
		return new(watchArgs).flags()
	case "commit":
		return new(commitArgs).flags()
	case "beat":
		return new(beatArgs).flags()
	}
	return nil
}

// newFlags is an empty flag set of the command name, which reports its
// errors rather than printing them.
func newFlags(name string) *flag.FlagSet {
	fs := flag.NewFlagSet(name, flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	return fs
}

// parseFlags parses args into fs; a value its flag cannot read is said as
// the command line says it (`--step "x": want a whole number such as 1`),
// not as the flag package does.
func parseFlags(fs *flag.FlagSet, args []string) error {
	var bad error
	fs.VisitAll(func(f *flag.Flag) { f.Value = &wordedValue{Value: f.Value, name: f.Name, bad: &bad} })
	if err := fs.Parse(args); err != nil {
		if bad != nil {
			return bad
		}
		return err
	}
	return nil
}

// usageLine is what the guard's command prints of a command line it
// refuses: what is wrong, then how it is used; how alone, for --help.
func usageLine(command string, err error, usage string) string {
	if errors.Is(err, flag.ErrHelp) {
		return "coordinator " + command + ": " + usage
	}
	return fmt.Sprintf("coordinator %s: %v; %s", command, err, usage)
}

// wordedValue is a flag's value that words what it cannot read into bad.
type wordedValue struct {
	flag.Value
	name string
	bad  *error
}

func (v *wordedValue) Set(s string) error {
	if err := v.Value.Set(s); err != nil {
		*v.bad = english.BadFlag(v.name, s, valueType(v.Value))
		return *v.bad
	}
	return nil
}

// IsBoolFlag keeps a bool flag one that needs no value.
func (v *wordedValue) IsBoolFlag() bool {
	b, ok := v.Value.(interface{ IsBoolFlag() bool })
	return ok && b.IsBoolFlag()
}

// valueType names the type of a flag's value as pflag names its own.
func valueType(v flag.Value) string {
	g, ok := v.(flag.Getter)
	if !ok {
		return "string"
	}
	switch g.Get().(type) {
	case time.Duration:
		return "duration"
	default:
		return fmt.Sprintf("%T", g.Get()) // bool, int, int64, uint, float64, string
	}
}
