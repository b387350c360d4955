package memckpt

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"strconv"
	"sync"
	"time"

	"github.com/hashicorp/go-hclog"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// Defaults of Config.
const (
	DefaultCopies       = 2
	DefaultMemory       = 1 << 30
	DefaultDiskInterval = 30 * time.Second
	// DefaultMaxUnauthenticated is far more than a job's peers open at
	// once (one push and one load of each other node), and few enough
	// goroutines and TLS states to hold for a flood.
	DefaultMaxUnauthenticated = 64
	// DefaultHandshakeTimeout is the longest a peer waits for a
	// handshake (auth.dial): a peer's handshake takes milliseconds.
	DefaultHandshakeTimeout   = 10 * time.Second
	DefaultRefusedLogInterval = time.Minute
)

// Node is what the store asks of its node's sidecar; the sidecar's Agent
// implements it.
type Node interface {
	// Fence returns nil if a process of generation may still store for
	// the job: the node runs that generation under a lease it holds.
	Fence(generation int64) error
	// Holds returns nil while the node holds its lease: what a write on
	// disk for the job needs.
	Holds() error
	// Members are the generation the node runs and its members, in rank
	// order; 0 and nil while it runs none.
	Members() (generation int64, members []membership.Member)
}

// Config configures a Service.
type Config struct {
	Job string
	// NodeID is this node's id.
	NodeID string
	Client *clientv3.Client
	Keys   membership.Keys
	// Copies bounds the copies held, own and replicas; DefaultCopies if 0.
	Copies int
	// Memory bounds their bytes; DefaultMemory if 0.
	Memory int64
	// DiskInterval is how often the newest copy is written to the path its
	// save named; DefaultDiskInterval if 0.
	DiskInterval time.Duration
	// Listen is the TCP address replicas are served at; ":0" if empty.
	Listen string
	// Host is the address other nodes reach this one at.
	Host string
	// ModuleDir is where elastic.py is written; if empty, a new temporary
	// directory (NewModuleDir), after those of killed sidecars are swept.
	ModuleDir string
	// MaxUnauthenticated bounds the peer connections held before they
	// have proven the job's secret; DefaultMaxUnauthenticated if 0. One
	// over it is closed at once, unless another address holds more than
	// its own (see gate).
	MaxUnauthenticated int
	// HandshakeTimeout is how long a peer connection has, from its
	// accept, to prove the job's secret (TLS handshake and hello) before
	// it is closed; DefaultHandshakeTimeout if 0.
	HandshakeTimeout time.Duration
	// RefusedLogInterval is how often an address whose peer connections
	// are refused is said in the log: its first refusal at once, then one
	// line an interval with the count of its refusals since and the last
	// reason; DefaultRefusedLogInterval if 0.
	RefusedLogInterval time.Duration
	Logger             hclog.Logger
}

// Service is one node's checkpoint store: the trainers' socket, the peers'
// port, replication and the disk writer.
type Service struct {
	cfg    Config
	logger hclog.Logger
	store  *store
	auth   *auth
	// incarnation is the job's life (Incarnation of its secret).
	incarnation string

	local  *net.UnixListener
	socket string
	peers  net.Listener
	addr   string
	tmpDir *ModuleDir // removed on Close, if New made it

	// gate holds the peer connections not yet authenticated.
	gate *gate
	// refusals counts refused peer connections, under refusedMu.
	refusedMu sync.Mutex
	refusals  *refusals

	node     Node
	pushKick chan struct{}
	diskKick chan struct{}
	diskMu   sync.Mutex
	written  Meta // the last copy written to disk, under diskMu

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	conns  sync.Map // net.Conn → struct{}: closed on Close
	closed sync.Once
}

// New checks cfg, reads (or creates) the job's secret, opens the
// trainers' socket and the peers' port and writes elastic.py. Nothing is
// served before Start.
func New(ctx context.Context, cfg Config) (*Service, error) {
	if cfg.Client == nil {
		return nil, errors.New("memckpt: an etcd client is required")
	}
	if err := membership.ValidateJobID(cfg.Job); err != nil {
		return nil, err
	}
	if err := membership.ValidateNodeID(cfg.NodeID); err != nil {
		return nil, err
	}
	if cfg.Keys == (membership.Keys{}) {
		cfg.Keys = membership.DefaultKeys()
	}
	if cfg.Copies == 0 {
		cfg.Copies = DefaultCopies
	}
	if cfg.Memory == 0 {
		cfg.Memory = DefaultMemory
	}
	if cfg.DiskInterval == 0 {
		cfg.DiskInterval = DefaultDiskInterval
	}
	if cfg.Listen == "" {
		cfg.Listen = ":0"
	}
	if cfg.MaxUnauthenticated == 0 {
		cfg.MaxUnauthenticated = DefaultMaxUnauthenticated
	}
	if cfg.HandshakeTimeout == 0 {
		cfg.HandshakeTimeout = DefaultHandshakeTimeout
	}
	if cfg.RefusedLogInterval == 0 {
		cfg.RefusedLogInterval = DefaultRefusedLogInterval
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	switch {
	case cfg.Copies < 1:
		return nil, fmt.Errorf("memckpt: %d copies: want at least 1", cfg.Copies)
	case cfg.Memory < 1<<20:
		return nil, fmt.Errorf("memckpt: memory %s: want at least 1MiB", FormatSize(cfg.Memory))
	case cfg.DiskInterval < 0:
		return nil, fmt.Errorf("memckpt: disk interval %s: must not be negative", cfg.DiskInterval)
	case cfg.MaxUnauthenticated < 1:
		return nil, fmt.Errorf("memckpt: %d unauthenticated connections: want at least 1", cfg.MaxUnauthenticated)
	case cfg.HandshakeTimeout < 0:
		return nil, fmt.Errorf("memckpt: handshake timeout %s: must not be negative", cfg.HandshakeTimeout)
	case cfg.RefusedLogInterval < 0:
		return nil, fmt.Errorf("memckpt: refused log interval %s: must not be negative", cfg.RefusedLogInterval)
	case cfg.Host == "":
		return nil, errors.New("memckpt: the node's host is required")
	}
	secret, err := JobSecret(ctx, cfg.Client, cfg.Keys, cfg.Job)
	if err != nil {
		return nil, err
	}
	a, err := newAuth(cfg.Job, secret)
	if err != nil {
		return nil, err
	}
	s := &Service{
		incarnation: Incarnation(secret),
		cfg:         cfg, logger: cfg.Logger.Named("checkpoint").With("job", cfg.Job, "node", cfg.NodeID),
		store: newStore(cfg.Copies, cfg.Memory), auth: a,
		gate: newGate(cfg.MaxUnauthenticated), refusals: newRefusals(cfg.RefusedLogInterval, refusedAddresses),
		pushKick: make(chan struct{}, 1), diskKick: make(chan struct{}, 1),
	}
	if err := s.open(); err != nil {
		s.closeListeners()
		return nil, err
	}
	return s, nil
}

func (s *Service) open() error {
	var tag [6]byte
	_, _ = rand.Read(tag[:])
	s.socket = fmt.Sprintf("@elastic-checkpoint-%d-%s", os.Getpid(), hex.EncodeToString(tag[:]))
	l, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.socket, Net: "unix"})
	if err != nil {
		return fmt.Errorf("checkpoint socket: %w", err)
	}
	s.local = l
	if s.peers, err = net.Listen("tcp", s.cfg.Listen); err != nil {
		return fmt.Errorf("checkpoint port: %w", err)
	}
	port := s.peers.Addr().(*net.TCPAddr).Port
	s.addr = net.JoinHostPort(s.cfg.Host, strconv.Itoa(port))
	if s.cfg.ModuleDir != "" {
		return WriteModule(s.cfg.ModuleDir)
	}
	if n := SweepModuleDirs(os.TempDir()); n > 0 {
		s.logger.Info("removed the module directories of sidecars that were killed", "count", n, "dir", os.TempDir())
	}
	if s.tmpDir, err = NewModuleDir(""); err != nil {
		return err
	}
	s.cfg.ModuleDir = s.tmpDir.Path()
	return nil
}

// Addr is host:port where the other sidecars reach this one: the node
// record's Checkpoint.
func (s *Service) Addr() string { return s.addr }

// Incarnation is the life of the job this sidecar serves
// (ELASTIC_CHECKPOINT_INCARNATION): every copy it takes is stamped with it.
func (s *Service) Incarnation() string { return s.incarnation }

// TrainerEnv is what a process started outside a sidecar's launcher (a
// test's) needs in its environment to save to this store, as
// trainerenv gives a generation's processes: the socket and the life.
func (s *Service) TrainerEnv() []string {
	return []string{"ELASTIC_CHECKPOINT_SOCKET=" + s.socket, "ELASTIC_CHECKPOINT_INCARNATION=" + s.incarnation}
}

// Socket is the trainers' socket, '@name' (ELASTIC_CHECKPOINT_SOCKET).
func (s *Service) Socket() string { return s.socket }

// ModuleDir is the directory of elastic.py, for the trainers' PYTHONPATH.
func (s *Service) ModuleDir() string { return s.cfg.ModuleDir }

// PythonPath is the trainers' PYTHONPATH: the module's directory, then
// user's path if any.
func (s *Service) PythonPath(user string) string { return PythonPathWith(s.cfg.ModuleDir, user) }

// PythonPathWith is a PYTHONPATH of the modules' directory dir, then the
// user's path if any.
func PythonPathWith(dir, user string) string {
	if user == "" {
		return dir
	}
	return dir + string(os.PathListSeparator) + user
}

// Start serves the trainers and the peers for node until Close.
func (s *Service) Start(node Node) {
	s.node = node
	s.ctx, s.cancel = context.WithCancel(context.Background())
	s.goRun(s.serveLocal)
	s.goRun(s.servePeers)
	s.goRun(s.refusedLoop)
	s.goRun(s.pushLoop)
	s.goRun(s.diskLoop)
}

func (s *Service) goRun(f func()) {
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		f()
	}()
}

// track keeps conn to close it on Close; untrack forgets it.
func (s *Service) track(c net.Conn) func() {
	s.conns.Store(c, struct{}{})
	return func() { s.conns.Delete(c); c.Close() }
}

// Close stops serving and waits for every goroutine. Safe to call twice.
func (s *Service) Close() {
	s.closed.Do(func() {
		if s.cancel != nil {
			s.cancel()
		}
		s.closeListeners()
		s.conns.Range(func(k, _ any) bool {
			k.(net.Conn).Close()
			return true
		})
		s.wg.Wait()
		// What is left of the refused peers' counts.
		s.refusedMu.Lock()
		lines := s.refusals.rest(time.Now())
		s.refusedMu.Unlock()
		for _, l := range lines {
			s.sayRefused(l)
		}
		if s.tmpDir != nil {
			s.tmpDir.Close()
		}
	})
}

func (s *Service) closeListeners() {
	if s.local != nil {
		s.local.Close()
	}
	if s.peers != nil {
		s.peers.Close()
	}
}

// stored is called once a save is held: replicate it and, in time, write
// it to disk.
func (s *Service) stored() {
	select {
	case s.pushKick <- struct{}{}:
	default:
	}
}

// WriteDisk writes the newest own copy to its path now, if it names one
// and is not written yet, while the node holds its lease: the node is
// about to leave the job.
func (s *Service) WriteDisk(ctx context.Context) {
	done := make(chan struct{})
	go func() {
		defer close(done)
		s.writeDisk()
	}()
	select {
	case <-done:
	case <-ctx.Done():
	}
}

func (s *Service) diskLoop() {
	t := time.NewTicker(s.cfg.DiskInterval)
	defer t.Stop()
	for {
		select {
		case <-s.ctx.Done():
			return
		case <-t.C:
		case <-s.diskKick:
		}
		s.writeDisk()
	}
}

// KickDisk asks for the newest copy on disk soon, without waiting: a
// generation ends.
func (s *Service) KickDisk() {
	select {
	case s.diskKick <- struct{}{}:
	default:
	}
}

func (s *Service) writeDisk() {
	s.diskMu.Lock()
	defer s.diskMu.Unlock()
	c := s.store.newest(s.cfg.NodeID)
	if c == nil || c.Path == "" || c.same(s.written) || s.node == nil {
		return
	}
	if err := s.node.Holds(); err != nil {
		return
	}
	start := time.Now()
	if err := writeFile(c.Path, *c, s.node.Holds); errors.Is(err, errNewerOnDisk) {
		// The trainer wrote later saves there itself while this sidecar
		// did not answer, or a later generation's copy is there.
		s.written = c.Meta
		s.logger.Debug("checkpoint not written to disk: the file is newer", "path", c.Path, "generation", c.Generation, "seq", c.Seq)
		return
	} else if err != nil {
		s.logger.Warn("checkpoint not written to disk", "path", c.Path, "error", err)
		return
	}
	s.written = c.Meta
	s.logger.Debug("checkpoint written to disk", "path", c.Path, "generation", c.Generation, "seq", c.Seq,
		"bytes", c.Size, "took", time.Since(start))
}
