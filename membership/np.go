package membership

import (
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// MaxNP is the largest number of nodes a job may ask for.
const MaxNP = 100000

// ErrInvalidNP is returned for an np that is neither "N" nor "MIN:MAX" with
// 1 <= MIN <= MAX <= MaxNP.
var ErrInvalidNP = errors.New("membership: invalid np")

// NP is a job's target number of worker nodes: exact when Min == Max, a range
// otherwise. The zero NP is unset.
type NP struct {
	Min int
	Max int
}

// ParseNP parses "N" or "MIN:MAX".
func ParseNP(s string) (NP, error) {
	s = strings.TrimSpace(s)
	if s == "" {
		return NP{}, fmt.Errorf("%w: empty, want N or MIN:MAX", ErrInvalidNP)
	}
	lo, hi, isRange := strings.Cut(s, ":")
	minN, err := parseCount(lo)
	if err != nil {
		return NP{}, fmt.Errorf("%w %q: %v", ErrInvalidNP, s, err)
	}
	maxN := minN
	if isRange {
		if maxN, err = parseCount(hi); err != nil {
			return NP{}, fmt.Errorf("%w %q: %v", ErrInvalidNP, s, err)
		}
		if minN > maxN {
			return NP{}, fmt.Errorf("%w %q: minimum %d is greater than maximum %d", ErrInvalidNP, s, minN, maxN)
		}
	}
	return NP{Min: minN, Max: maxN}, nil
}

func parseCount(s string) (int, error) {
	if s == "" {
		return 0, errors.New("missing number")
	}
	for _, r := range s {
		if r < '0' || r > '9' {
			return 0, fmt.Errorf("%q is not a positive whole number", s)
		}
	}
	n, err := strconv.Atoi(s)
	if err != nil || n > MaxNP {
		return 0, fmt.Errorf("%s is more than the maximum of %d nodes", s, MaxNP)
	}
	if n < 1 {
		return 0, fmt.Errorf("%d nodes: need at least 1", n)
	}
	return n, nil
}

// IsZero reports whether np is unset.
func (np NP) IsZero() bool { return np == NP{} }

// IsRange reports whether np lets the job run at more than one size.
func (np NP) IsRange() bool { return np.Min != np.Max }

// Validate reports whether np could have come from ParseNP.
func (np NP) Validate() error {
	if np.Min < 1 || np.Max > MaxNP || np.Min > np.Max {
		return fmt.Errorf("%w %d:%d: want 1 <= min <= max <= %d", ErrInvalidNP, np.Min, np.Max, MaxNP)
	}
	return nil
}

// FixedNP is an np of exactly n nodes.
func FixedNP(n int) NP { return NP{Min: n, Max: n} }

// String renders np as ParseNP reads it; the zero NP is "".
func (np NP) String() string {
	if np.IsZero() {
		return ""
	}
	if np.IsRange() {
		return fmt.Sprintf("%d:%d", np.Min, np.Max)
	}
	return strconv.Itoa(np.Min)
}

// MarshalJSON writes np as a JSON string, "4" or "2:8"; the zero NP is "".
func (np NP) MarshalJSON() ([]byte, error) { return json.Marshal(np.String()) }

// UnmarshalJSON reads a JSON string as ParseNP does, or a bare JSON number;
// "" is the zero NP, which a spec refuses (DecodeSpec) and a status of a job
// without one holds.
func (np *NP) UnmarshalJSON(data []byte) error {
	var s string
	if err := json.Unmarshal(data, &s); err != nil {
		var n json.Number
		if err := json.Unmarshal(data, &n); err != nil {
			return fmt.Errorf("%w: %s is neither a string nor a number", ErrInvalidNP, data)
		}
		s = n.String()
	}
	if s == "" {
		*np = NP{}
		return nil
	}
	parsed, err := ParseNP(s)
	if err != nil {
		return err
	}
	*np = parsed
	return nil
}
