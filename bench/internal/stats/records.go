package stats

import (
	"bufio"
	"bytes"
	"os"
	"strings"
)

// Records are the lines of a trainer's log at path that hold n fields,
// split at white space: the samples a harness reads. A line being written
// is passed over, and a file not there yet has none.
func Records(path string, n int) [][]string {
	data, _ := os.ReadFile(path)
	var out [][]string
	sc := bufio.NewScanner(bytes.NewReader(data))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) == n {
			out = append(out, f)
		}
	}
	return out
}
