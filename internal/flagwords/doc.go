// Package flagwords words a flag's bad value as the command line words
// its other errors: the flag, the value, and what the flag wants
// (`--spares "abc": want a whole number such as 1`), never a parser's text
// (`strconv.ParseInt: parsing "abc": invalid syntax`). Cobra's commands
// and the guard's own, which parse their flags before cobra is reached,
// word them alike. It imports the standard library alone: the guard's
// commands start in a hurry.
package flagwords
