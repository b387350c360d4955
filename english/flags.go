package english

import "fmt"

// BadFlag is the error of value, given to the flag --name whose value is
// of type typ (pflag's names: int, duration, bool, stringSlice...), which
// the flag's parser refused: the flag, the value and what it wants
// (`--spares "abc": want a whole number such as 1`), never the parser's
// text. Cobra's commands and the guard's own, which parse their flags
// before cobra is reached, word them alike.
func BadFlag(name, value, typ string) error {
	return fmt.Errorf("--%s %q: want %s", name, value, FlagWants(typ))
}

// FlagWants is what a flag whose value is of type typ takes.
func FlagWants(typ string) string {
	switch typ {
	case "int", "int8", "int16", "int32", "int64", "count":
		return "a whole number such as 1"
	case "uint", "uint8", "uint16", "uint32", "uint64":
		return "a whole number, 0 or more, such as 1"
	case "float32", "float64":
		return "a number such as 0.5"
	case "duration":
		return "a duration such as 30s or 2m"
	case "bool":
		return "true or false"
	case "stringSlice", "stringArray":
		return "a comma-separated list such as a,b"
	case "intSlice", "int32Slice", "int64Slice", "uintSlice":
		return "whole numbers separated by commas, such as 1,2"
	case "durationSlice":
		return "durations separated by commas, such as 30s,2m"
	case "ip":
		return "an IP address such as 10.0.0.5"
	}
	return "a value of type " + typ
}
