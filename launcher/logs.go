package launcher

import (
	"fmt"
	"path/filepath"

	"github.com/elastictraining/coordinator/guard"
)

// Tee says which processes' output also reaches the terminal when every
// process's output is kept in a file.
type Tee string

// Tee modes.
const (
	TeeAll   Tee = "all"
	TeeRank0 Tee = "rank0"
	TeeNone  Tee = "none"
)

// ParseTee reads a --tee value.
func ParseTee(s string) (Tee, error) {
	switch t := Tee(s); t {
	case TeeAll, TeeRank0, TeeNone:
		return t, nil
	}
	return "", fmt.Errorf("%q: want all, rank0 or none", s)
}

// DefaultLogMaxBytes bounds one log file: past it, the file is rotated to
// NAME.1, so a rank keeps at most twice this.
const DefaultLogMaxBytes = 100 << 20

// Logs keeps every process's output in a file of its own under Dir:
// rank-R.log for a worker of global rank R, ps-N.log, heter-N.log and
// scheduler-N.log for other roles (ps-N-L.log for local rank L of several),
// each generation's output after a line that names it.
type Logs struct {
	Dir string
	// MaxBytes bounds each file (see guard.Log); 0 is DefaultLogMaxBytes.
	MaxBytes int64
	// Tee is whose output also reaches the terminal; "" is TeeAll.
	Tee Tee
}

// LogName is the file name of the output of local rank local in p.
func LogName(p Procs, local int) string {
	if p.Role == "" || p.Role == "worker" {
		return fmt.Sprintf("rank-%d.log", p.GlobalRankBase+local)
	}
	if len(p.Env) > 1 {
		return fmt.Sprintf("%s-%d-%d.log", p.Role, p.NodeRank, local)
	}
	return fmt.Sprintf("%s-%d.log", p.Role, p.NodeRank)
}

// proc returns the log of local rank local in p, and whether its output
// stays off the terminal.
func (l *Logs) proc(p Procs, local int) (*guard.Log, bool) {
	if l == nil || l.Dir == "" {
		return nil, false
	}
	maxBytes := l.MaxBytes
	if maxBytes == 0 {
		maxBytes = DefaultLogMaxBytes
	}
	role := p.Role
	if role == "" {
		role = "worker"
	}
	header := fmt.Sprintf("generation %d: %s rank %d of %d (node rank %d, local rank %d)", p.Generation, role, p.GlobalRankBase+local, p.WorldSize, p.NodeRank, local)
	log := &guard.Log{Path: filepath.Join(l.Dir, LogName(p, local)), Header: header, MaxBytes: maxBytes}
	switch l.Tee {
	case TeeNone:
		return log, true
	case TeeRank0:
		return log, !(role == "worker" && p.GlobalRankBase+local == 0)
	}
	return log, false
}
