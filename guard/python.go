package guard

import (
	"errors"
	"path/filepath"
	"regexp"
	"strings"
)

// PythonCommand is a training command whose program is a Python
// interpreter, split as the interpreter parses it: what a warm interpreter
// needs to start as the command would, and then to become it.
type PythonCommand struct {
	// Options are the interpreter's own options, before the script, -m or
	// -c: a warm interpreter is started with them.
	Options []string
	// Exactly one of Script, Module and Code is what runs.
	Script, Module, Code string
	// Args follow it; sys.argv[1:].
	Args []string
}

// ErrNotPython is returned by ParsePython for a command a warm interpreter
// cannot become.
var ErrNotPython = errors.New("guard: not a Python command a warm interpreter can run")

// pythonName is the basename of a Python interpreter: python, python3,
// python3.11. A symlink is taken by its own name, not resolved.
var pythonName = regexp.MustCompile(`^python(\d+(\.\d+)?)?$`)

// IsPython reports whether program names a Python interpreter.
func IsPython(program string) bool { return pythonName.MatchString(filepath.Base(program)) }

// ParsePython splits argv, a Python interpreter's command line, as the
// interpreter would. A command that reads its program from stdin, or only
// prints (--version, -h), or runs interactively (-i), is ErrNotPython.
func ParsePython(argv []string) (PythonCommand, error) {
	var c PythonCommand
	if len(argv) == 0 || !IsPython(argv[0]) {
		return c, ErrNotPython
	}
	for i := 1; i < len(argv); i++ {
		a := argv[i]
		switch {
		case a == "--check-hash-based-pycs":
			if i+1 >= len(argv) {
				return c, ErrNotPython
			}
			c.Options = append(c.Options, a, argv[i+1])
			i++
			continue
		case strings.HasPrefix(a, "--check-hash-based-pycs="):
			c.Options = append(c.Options, a)
			continue
		case a == "-" || a == "--" || strings.HasPrefix(a, "--"):
			return c, ErrNotPython
		case !strings.HasPrefix(a, "-"):
			c.Script, c.Args = a, argv[i+1:]
			return c, nil
		}
		// A cluster of one-letter options: -uO, -Wignore, -uc CODE.
		for j := 1; j < len(a); j++ {
			switch ch := a[j]; ch {
			case 'c', 'm', 'W', 'X':
				arg, next := a[j+1:], i
				if arg == "" {
					if i+1 >= len(argv) {
						return c, ErrNotPython
					}
					arg, next = argv[i+1], i+1
				}
				if j > 1 {
					c.Options = append(c.Options, a[:j])
				}
				switch ch {
				case 'c':
					c.Code, c.Args = arg, argv[next+1:]
					return c, nil
				case 'm':
					c.Module, c.Args = arg, argv[next+1:]
					return c, nil
				}
				c.Options = append(c.Options, "-"+string(ch), arg)
				i, j = next, len(a)
				continue
			case 'h', '?', 'V', 'i', 'x':
				// Help, version, interactive, and skipping the script's
				// first line: not what a warm interpreter does.
				return c, ErrNotPython
			}
			if j == len(a)-1 {
				c.Options = append(c.Options, a)
			}
		}
	}
	return c, ErrNotPython // options only: an interactive interpreter
}

// sysArgv is the sys.argv the command sees before it runs, as the
// interpreter sets it.
func (c PythonCommand) sysArgv() []string {
	first := c.Script
	switch {
	case c.Module != "":
		first = "-m"
	case c.Script == "":
		first = "-c"
	}
	return append([]string{first}, c.Args...)
}

// path0 is sys.path[0] as the interpreter sets it for the command run in
// dir: the script's directory, dir for -m, "" for -c.
func (c PythonCommand) path0(dir string) string {
	switch {
	case c.Script != "":
		p := c.Script
		if !filepath.IsAbs(p) {
			p = filepath.Join(dir, p)
		}
		return filepath.Dir(p)
	case c.Module != "":
		return dir
	}
	return ""
}

// moduleName is a dotted Python identifier, as --preload takes.
var moduleName = regexp.MustCompile(`^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$`)

// ValidModule reports whether name is a module name --preload can import.
func ValidModule(name string) bool { return moduleName.MatchString(name) }
