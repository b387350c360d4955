package membership

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"
)

// MaxJobNameLength is the longest job name a user may give: PaddlePaddle
// takes any string as a job id; this bounds it to what a key and a
// Kubernetes annotation hold comfortably.
const MaxJobNameLength = 253

// jobHashLength is how many hex digits of the name's hash end the id of a
// name that is not a DNS-1123 label.
const jobHashLength = 6

// JobIDFor returns the job id that a job name as a user gives it (what
// PaddlePaddle's --job_id or PADDLE_ELASTIC_JOB_ID takes: 'XXXXXX',
// job_1) is stored under. A DNS-1123 label is its own id. Any other name
// is lower-cased, each run of other characters becomes '-', and a hash of
// the whole name is appended, so that the mapping is the same on every
// node and two names never share an id ("job_1" is job-1-xxxxxx, never
// "job-1"). The spec keeps the name (Spec.Name) for display.
func JobIDFor(name string) (string, error) {
	if ValidateJobID(name) == nil {
		return name, nil
	}
	switch {
	case name == "":
		return "", fmt.Errorf("%w: empty", ErrInvalidJobID)
	case len(name) > MaxJobNameLength:
		return "", fmt.Errorf("%w: longer than %d characters", ErrInvalidJobID, MaxJobNameLength)
	case !utf8.ValidString(name):
		return "", fmt.Errorf("%w %q: not UTF-8", ErrInvalidJobID, name)
	case strings.IndexFunc(name, func(r rune) bool { return !unicode.IsPrint(r) }) >= 0:
		return "", fmt.Errorf("%w %q: has a control character or a blank other than a space", ErrInvalidJobID, name)
	case strings.TrimSpace(name) == "":
		return "", fmt.Errorf("%w: only blanks", ErrInvalidJobID)
	}
	var b strings.Builder
	dash := false
	for _, r := range strings.ToLower(name) {
		if (r >= 'a' && r <= 'z') || (r >= '0' && r <= '9') {
			if dash && b.Len() > 0 {
				b.WriteByte('-')
			}
			b.WriteRune(r)
			dash = false
			continue
		}
		dash = true
	}
	base := b.String()
	if limit := MaxJobIDLength - jobHashLength - 1; len(base) > limit {
		base = strings.TrimRight(base[:limit], "-")
	}
	if base == "" {
		base = "job"
	}
	sum := sha256.Sum256([]byte(name))
	return base + "-" + hex.EncodeToString(sum[:])[:jobHashLength], nil
}
