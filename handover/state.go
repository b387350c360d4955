package handover

import (
	"encoding/json"
	"errors"
	"fmt"
	"path"
	"regexp"
	"strings"
	"time"

	"github.com/elastictraining/coordinator/membership"
)

// stateVersion is the version of the file's format.
const stateVersion = 1

// ErrInvalidState is wrapped by the errors of Decode.
var ErrInvalidState = errors.New("handover: invalid state file")

// State is what a sidecar keeps on its machine for its successor.
type State struct {
	Version int `json:"version"`
	// Cluster is the etcd cluster's id and Prefix the keys' root: a file
	// of another etcd, or of another tree of keys, is not this node's.
	Cluster uint64 `json:"cluster"`
	Prefix  string `json:"prefix"`
	Job     string `json:"job"`
	Node    string `json:"node"`
	// Boot is the machine's boot id and PidNS the sidecar's pid namespace
	// (as /proc/self/ns/pid names it): its pids mean something only on
	// the same boot, and in the same namespace.
	Boot  string `json:"boot"`
	PidNS string `json:"pidns"`
	// Pid and Start (clock ticks after boot, /proc/PID/stat's 22nd field)
	// are the sidecar's process: a pid reused by another process has
	// another start time.
	Pid   int    `json:"pid"`
	Start uint64 `json:"start"`
	// Lease is the sidecar's lease (0 before it registered) and TTLSeconds
	// its TTL.
	Lease      int64 `json:"lease,omitempty"`
	TTLSeconds int64 `json:"ttlSeconds"`
	// Guard is the sidecar's process guard, nil before one started.
	Guard     *Guard    `json:"guard,omitempty"`
	UpdatedAt time.Time `json:"updatedAt"`
}

// Guard is a sidecar's process guard and how to find what it ran.
type Guard struct {
	Pid    int    `json:"pid"`
	Start  uint64 `json:"start"`
	Marker string `json:"marker"`
	Cgroup string `json:"cgroup,omitempty"`
}

var markerPattern = regexp.MustCompile(`^[0-9a-f]{1,64}$`)

// Decode reads a state file. Whatever it accepts is safe to act on: ids a
// key may hold, positive pids, a marker of hex digits, a cgroup that is an
// absolute clean path below /sys/fs/cgroup.
func Decode(data []byte) (State, error) {
	var s State
	if err := json.Unmarshal(data, &s); err != nil {
		return State{}, fmt.Errorf("%w: %v", ErrInvalidState, err)
	}
	bad := func(format string, args ...any) (State, error) {
		return State{}, fmt.Errorf("%w: %s", ErrInvalidState, fmt.Sprintf(format, args...))
	}
	switch {
	case s.Version != stateVersion:
		return bad("version %d, want %d", s.Version, stateVersion)
	case membership.ValidateJobID(s.Job) != nil:
		return bad("job %q", s.Job)
	case membership.ValidateNodeID(s.Node) != nil:
		return bad("node %q", s.Node)
	case s.Pid <= 0 || s.Start == 0:
		return bad("no sidecar process")
	case s.Lease < 0 || s.TTLSeconds < 0:
		return bad("negative lease or ttl")
	case s.Boot == "" || s.PidNS == "":
		return bad("no boot id or pid namespace")
	}
	if g := s.Guard; g != nil {
		switch {
		case g.Pid <= 0 || g.Start == 0:
			return bad("no guard process")
		case !markerPattern.MatchString(g.Marker):
			return bad("guard marker %q", g.Marker)
		case g.Cgroup != "" && !validCgroup(g.Cgroup):
			return bad("guard cgroup %q", g.Cgroup)
		}
	}
	return s, nil
}

// validCgroup reports whether dir can be a guard's cgroup: a clean absolute
// path below the cgroup v2 mount, of a guard's name.
func validCgroup(dir string) bool {
	return path.Clean(dir) == dir && strings.HasPrefix(dir, "/sys/fs/cgroup/") && strings.HasPrefix(path.Base(dir), "elastic-guard-")
}

// Encode writes a state file's contents.
func Encode(s State) ([]byte, error) {
	s.Version = stateVersion
	data, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(data, '\n'), nil
}
