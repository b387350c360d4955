package membership

import (
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
)

// DefaultPrefix is the root of every key the product writes.
const DefaultPrefix = "/elastic/"

// MaxJobIDLength is the longest job id: a DNS-1123 label.
const MaxJobIDLength = 63

// MaxNodeIDLength is the longest node id: a DNS-1123 subdomain, the longest
// Kubernetes pod name.
const MaxNodeIDLength = 253

var (
	// ErrInvalidJobID is returned for a job id that is not a DNS-1123 label.
	ErrInvalidJobID = errors.New("membership: invalid job id")
	// ErrInvalidNodeID is returned for a node id that cannot be a key segment.
	ErrInvalidNodeID = errors.New("membership: invalid node id")
	// ErrInvalidPrefix is returned for a key prefix that does not start and end with "/".
	ErrInvalidPrefix = errors.New("membership: invalid key prefix")
)

var (
	jobIDPattern  = regexp.MustCompile(`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`)
	nodeIDPattern = regexp.MustCompile(`^[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$`)
)

// ValidateJobID reports whether id is a DNS-1123 label, the only form of job
// id that is allowed into a key.
func ValidateJobID(id string) error {
	return validateID(id, ErrInvalidJobID, MaxJobIDLength, jobIDPattern,
		"must be a DNS-1123 label (lower-case letters, digits and '-', starting and ending with a letter or digit)")
}

// ValidateNodeID reports whether id can name a node: letters, digits, '-',
// '_' and '.', starting and ending with a letter or digit, so that it is one
// key segment and a pod name always fits.
func ValidateNodeID(id string) error {
	return validateID(id, ErrInvalidNodeID, MaxNodeIDLength, nodeIDPattern,
		"use letters, digits, '-', '_' and '.', starting and ending with a letter or digit")
}

// validateID checks an id against its length and pattern; the error is
// sentinel, saying what is wrong, and hint when the pattern does not match.
func validateID(id string, sentinel error, maxLength int, pattern *regexp.Regexp, hint string) error {
	switch {
	case id == "":
		return fmt.Errorf("%w: empty", sentinel)
	case len(id) > maxLength:
		return fmt.Errorf("%w %q: longer than %d characters", sentinel, id, maxLength)
	case !pattern.MatchString(id):
		return fmt.Errorf("%w %q: %s", sentinel, id, hint)
	}
	return nil
}

// Keys builds the keys of the v1 schema under one root prefix:
//
//	<prefix>jobs/<job>/spec
//	<prefix>jobs/<job>/nodes/<node>
//	<prefix>jobs/<job>/plan
//	<prefix>jobs/<job>/tables/<generation>/<chunk>
//	<prefix>jobs/<job>/status
//	<prefix>jobs/<job>/events/<seq>
//	<prefix>jobs/<job>/bridge
//	<prefix>jobs/<job>/evictions/<node>/<lease>
//	<prefix>jobs/<job>/takeovers/<node>/<lease>
//	<prefix>jobs/<job>/secret
//	<prefix>leader
//
// Every prefix it returns ends in "/", so that a range over job "a" can never
// reach job "ab".
type Keys struct {
	prefix string
}

// NewKeys returns the schema rooted at prefix; an empty prefix means
// DefaultPrefix.
func NewKeys(prefix string) (Keys, error) {
	if prefix == "" {
		prefix = DefaultPrefix
	}
	if !strings.HasPrefix(prefix, "/") || !strings.HasSuffix(prefix, "/") || strings.Contains(prefix, "//") {
		return Keys{}, fmt.Errorf("%w %q: must start and end with '/' and have no empty segment", ErrInvalidPrefix, prefix)
	}
	return Keys{prefix: prefix}, nil
}

// DefaultKeys is the schema rooted at DefaultPrefix.
func DefaultKeys() Keys { return Keys{prefix: DefaultPrefix} }

// Prefix is the root of the schema.
func (k Keys) Prefix() string { return k.root() }

func (k Keys) root() string {
	if k.prefix == "" {
		return DefaultPrefix
	}
	return k.prefix
}

// Jobs is the prefix of every job's keys.
func (k Keys) Jobs() string { return k.root() + "jobs/" }

// Job is the prefix of one job's keys.
func (k Keys) Job(job string) string { return k.Jobs() + job + "/" }

// Spec is the key of a job's spec record.
func (k Keys) Spec(job string) string { return k.Job(job) + "spec" }

// Nodes is the prefix of a job's node records.
func (k Keys) Nodes(job string) string { return k.Job(job) + "nodes/" }

// Node is the key of one node's record.
func (k Keys) Node(job, node string) string { return k.Nodes(job) + node }

// Plan is the key of a job's plan, written only by the coordinator leader.
func (k Keys) Plan(job string) string { return k.Job(job) + "plan" }

// Status is the key of a job's status record.
func (k Keys) Status(job string) string { return k.Job(job) + "status" }

// Bridge is the key of the Kubernetes bridge's report on a job.
func (k Keys) Bridge(job string) string { return k.Job(job) + "bridge" }

// Secret is the key of the job's secret: random bytes, written once by the
// first sidecar of the job, with which its sidecars prove to each other that
// they are of the job (memckpt's replica traffic). It lives under the job's
// prefix, so the job's own etcd user reads it and nobody else's does, and
// it goes with the job when the job is deleted. ParseJobKey does not know
// it: no reader of the job's records (coordinator, bridge) needs it.
func (k Keys) Secret(job string) string { return k.Job(job) + "secret" }

// Autoscaler is the key of the autoscaler's report on a job.
func (k Keys) Autoscaler(job string) string { return k.Job(job) + "autoscaler" }

// Tables is the prefix of a job's stored rank tables.
func (k Keys) Tables(job string) string { return k.Job(job) + "tables/" }

// TableGeneration is the prefix of the chunks of the rank table first
// committed in generation gen. Generations are zero-padded so that the
// keys sort by generation and a range can delete the older ones.
func (k Keys) TableGeneration(job string, gen int64) string {
	return k.Tables(job) + fmt.Sprintf("%020d/", gen)
}

// TableChunk is the key of one chunk of a stored rank table.
func (k Keys) TableChunk(job string, gen int64, chunk int) string {
	return k.TableGeneration(job, gen) + fmt.Sprintf("%06d", chunk)
}

// Events is the prefix of a job's event timeline.
func (k Keys) Events(job string) string { return k.Job(job) + "events/" }

// Event is the key of one event; sequence numbers are zero-padded so that
// keys sort in the order the events happened.
func (k Keys) Event(job string, seq int64) string {
	return k.Events(job) + fmt.Sprintf("%020d", seq)
}

// Evictions is the prefix of a job's eviction records.
func (k Keys) Evictions(job string) string { return k.Job(job) + "evictions/" }

// Eviction is the key of the record of a node's eviction under one lease.
// The lease is part of the key: a node evicted again under a new lease
// (a new pod of the same name) must not replace the record that keeps the
// coordinator waiting for the first one's processes.
func (k Keys) Eviction(job, node string, lease int64) string {
	return k.Evictions(job) + node + "/" + strconv.FormatInt(lease, 16)
}

// Takeovers is the prefix of a job's takeover records.
func (k Keys) Takeovers(job string) string { return k.Job(job) + "takeovers/" }

// Takeover is the key of the record that a node's next sidecar took the
// node back from the given lease, its processes dead.
func (k Keys) Takeover(job, node string, lease int64) string {
	return k.Takeovers(job) + node + "/" + strconv.FormatInt(lease, 16)
}

// Leader is the election name of the coordinator replicas; etcd's
// concurrency.Election appends "/" and the campaigner's lease to it.
func (k Keys) Leader() string { return k.root() + "leader" }

// KeyKind says which record of a job a key holds.
type KeyKind int

// The kinds of key under a job's prefix.
const (
	KindUnknown KeyKind = iota
	KindSpec
	KindNode
	KindPlan
	KindStatus
	KindEvent
	KindBridge
	KindEviction
	KindAutoscaler
	KindTable
	KindTakeover
)

// String names the kind as the metrics and messages do: spec, node, ...
func (k KeyKind) String() string {
	switch k {
	case KindSpec:
		return "spec"
	case KindNode:
		return "node"
	case KindPlan:
		return "plan"
	case KindStatus:
		return "status"
	case KindEvent:
		return "event"
	case KindBridge:
		return "bridge"
	case KindEviction:
		return "eviction"
	case KindAutoscaler:
		return "autoscaler"
	case KindTable:
		return "table"
	case KindTakeover:
		return "takeover"
	}
	return "unknown"
}

// JobKey is a key of the schema taken apart.
type JobKey struct {
	Job  string
	Kind KeyKind
	// Name is the node id of a KindNode, KindEviction or KindTakeover key
	// and the sequence number of a KindEvent key.
	Name string
	// Lease is the evicted lease of a KindEviction key, the revoked one of
	// a KindTakeover key.
	Lease int64
	// Generation and Chunk locate a KindTable key's chunk.
	Generation int64
	Chunk      int
}

// ParseJobKey takes apart a key under Jobs(). It reports false for keys the
// schema does not define, including keys whose job or node id is invalid.
func (k Keys) ParseJobKey(key string) (JobKey, bool) {
	rest, ok := strings.CutPrefix(key, k.Jobs())
	if !ok {
		return JobKey{}, false
	}
	job, rest, ok := strings.Cut(rest, "/")
	if !ok || ValidateJobID(job) != nil {
		return JobKey{}, false
	}
	switch rest {
	case "spec":
		return JobKey{Job: job, Kind: KindSpec}, true
	case "plan":
		return JobKey{Job: job, Kind: KindPlan}, true
	case "status":
		return JobKey{Job: job, Kind: KindStatus}, true
	case "bridge":
		return JobKey{Job: job, Kind: KindBridge}, true
	case "autoscaler":
		return JobKey{Job: job, Kind: KindAutoscaler}, true
	}
	if node, ok := strings.CutPrefix(rest, "nodes/"); ok {
		if ValidateNodeID(node) != nil {
			return JobKey{}, false
		}
		return JobKey{Job: job, Kind: KindNode, Name: node}, true
	}
	for prefix, kind := range map[string]KeyKind{"evictions/": KindEviction, "takeovers/": KindTakeover} {
		if nodeLease, ok := strings.CutPrefix(rest, prefix); ok {
			node, lease, ok := parseNodeLease(nodeLease)
			if !ok {
				return JobKey{}, false
			}
			return JobKey{Job: job, Kind: kind, Name: node, Lease: lease}, true
		}
	}
	if chunk, ok := strings.CutPrefix(rest, "tables/"); ok {
		gen, idx, ok := strings.Cut(chunk, "/")
		g, gerr := strconv.ParseInt(gen, 10, 64)
		i, ierr := strconv.Atoi(idx)
		if !ok || gerr != nil || ierr != nil || g < 1 || i < 0 || len(gen) != 20 || len(idx) != 6 {
			return JobKey{}, false
		}
		return JobKey{Job: job, Kind: KindTable, Generation: g, Chunk: i}, true
	}
	if seq, ok := strings.CutPrefix(rest, "events/"); ok {
		if _, err := strconv.ParseUint(seq, 10, 63); err != nil {
			return JobKey{}, false
		}
		return JobKey{Job: job, Kind: KindEvent, Name: seq}, true
	}
	return JobKey{}, false
}

// parseNodeLease takes apart NODE/LEASE, the lease in lower-case hex.
func parseNodeLease(s string) (node string, lease int64, ok bool) {
	node, hex, ok := strings.Cut(s, "/")
	if !ok || ValidateNodeID(node) != nil {
		return "", 0, false
	}
	lease, err := strconv.ParseInt(hex, 16, 64)
	if err != nil || lease <= 0 || strconv.FormatInt(lease, 16) != hex {
		return "", 0, false
	}
	return node, lease, true
}
