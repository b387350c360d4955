package main

import (
	"errors"

	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/english"
)

// A flag's bad value is refused before the command does anything, in one
// line in the command line's words: the flag, the value, what it wants.
// What pflag cannot read (a number, a duration, true or false) it refuses
// while it parses, worded by flagError; a string flag whose values are
// checked (a choice, a format, an address, a file) is checked by
// checkGivenFlags once the flags are read, before anything is required
// (--etcd-endpoints, --np) or started. A value read from a variable, a
// flag's default, is checked where it is used, which names the variable.

// flagError is the root's FlagErrorFunc: what pflag could not read, as a
// usage error.
func flagError(_ *cobra.Command, err error) error {
	var bad *pflag.InvalidValueError
	if errors.As(err, &bad) {
		f := bad.GetFlag()
		return usageError{english.BadFlag(f.Name, bad.GetValue(), f.Value.Type())}
	}
	var missing *pflag.ValueRequiredError
	if errors.As(err, &missing) {
		f := missing.GetFlag()
		if f.Value.Type() == "string" {
			return usagef("--%s needs a value", f.Name)
		}
		return usagef("--%s needs a value: want %s", f.Name, english.FlagWants(f.Value.Type()))
	}
	return usageError{err}
}

// checkedValue is a flag's value, and the check of a value given to it.
type checkedValue struct {
	pflag.Value
	check func() error
}

// checkGiven has the flag name of fs checked by check, which reads the
// flag's variable, when the flag is given.
func checkGiven(fs *pflag.FlagSet, name string, check func() error) {
	f := fs.Lookup(name)
	f.Value = &checkedValue{Value: f.Value, check: check}
	// The help shows a default unless pflag knows that it reads as none,
	// which it no longer does of the list it does not see.
	if f.DefValue == "[]" {
		f.DefValue = ""
	}
}

// checkGivenFlags is the root's PersistentPreRunE: the checks of the
// flags given, the first one that fails.
func checkGivenFlags(cmd *cobra.Command, _ []string) error {
	var err error
	cmd.Flags().Visit(func(f *pflag.Flag) {
		if c, ok := f.Value.(*checkedValue); ok && err == nil {
			err = c.check()
		}
	})
	return err
}
