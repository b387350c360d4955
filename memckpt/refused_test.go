package memckpt

import (
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/internal/testkit/proctest"
	"github.com/elastictraining/coordinator/membership"
)

// guarded starts the store of node "a" of job "job" with cfg's limits,
// logging its warnings into logs.
func guarded(t *testing.T, cli *clientv3.Client, cfg Config, logs *proctest.Buffer) *Service {
	t.Helper()
	cfg.Job, cfg.NodeID, cfg.Client, cfg.Memory = "job", "a", cli, 64<<20
	cfg.Listen, cfg.Host, cfg.ModuleDir = "127.0.0.1:0", "127.0.0.1", t.TempDir()
	cfg.Logger = hclog.New(&hclog.LoggerOptions{Output: logs, Level: hclog.Warn})
	s, err := New(t.Context(), cfg)
	require.NoError(t, err)
	s.Start(&testNode{})
	t.Cleanup(s.Close)
	return s
}

// What clients that do not hold the job's secret send first.
var (
	garbage   = []byte("\x00\x01garbage\xff\xfe\r\n")
	plainHTTP = []byte("GET /checkpoint HTTP/1.1\r\nHost: sidecar\r\n\r\n")
	// bogusHello is a TLS record of a ClientHello whose body is cut
	// short: what a scanner's probe looks like.
	bogusHello = []byte{0x16, 0x03, 0x01, 0x00, 0x0a, 0x01, 0x00, 0x00, 0x06, 0x03, 0x03, 0xde, 0xad, 0xbe, 0xef}
)

// dialFrom connects to addr from the loopback address from (any of
// 127.0.0.0/8 is this machine's): another host, to the sidecar.
func dialFrom(from, addr string) (net.Conn, error) {
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}, Timeout: 5 * time.Second}
	return d.Dial("tcp", addr)
}

// flood opens n connections to addr from the addresses from (in turn),
// 16 at a time, each sending garbage, plain HTTP, a bogus ClientHello or
// a real TLS handshake with a wrong secret, and reads each until the
// sidecar closes it.
func flood(t *testing.T, addr string, n int, from ...string) {
	t.Helper()
	wrong, err := newAuth("job", []byte("0123456789abcdef0123456789abcdef"))
	require.NoError(t, err)
	var wg sync.WaitGroup
	sem := make(chan struct{}, 16)
	errs := make(chan error, n)
	for i := range n {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			errs <- unauthenticated(wrong, from[i%len(from)], addr, i%4)
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
}

// unauthenticated is one connection of a flood, of the kind kind; it
// returns once the sidecar has closed it.
func unauthenticated(wrong *auth, from, addr string, kind int) error {
	raw, err := dialFrom(from, addr)
	if err != nil {
		return err
	}
	defer raw.Close()
	_ = raw.SetDeadline(time.Now().Add(30 * time.Second))
	switch kind {
	case 0:
		_, err = raw.Write(garbage)
	case 1:
		_, err = raw.Write(plainHTTP)
	case 2:
		_, err = raw.Write(bogusHello)
	default:
		conn := tls.Client(raw, wrong.client)
		if err := conn.Handshake(); err != nil {
			return err
		}
		if err := wrong.hello(conn); !errors.Is(err, ErrUnauthenticated) {
			return fmt.Errorf("a wrong secret: %v, want %v", err, ErrUnauthenticated)
		}
		_, err = io.Copy(io.Discard, conn)
		return err
	}
	if err != nil {
		return err
	}
	// The sidecar closes it: whatever it answers, then the end.
	if _, err := io.Copy(io.Discard, raw); err != nil && !isReset(err) {
		return fmt.Errorf("not closed by the sidecar: %w", err)
	}
	return nil
}

// isReset: the sidecar closed the connection with bytes unread.
func isReset(err error) bool {
	return strings.Contains(err.Error(), "connection reset by peer")
}

// refusedLines are the log's lines about refused peers, and the
// refusals they count.
func refusedLines(logs string) (lines []string, total int) {
	re := regexp.MustCompile(`refusals=(\d+)`)
	for _, l := range strings.Split(logs, "\n") {
		if !strings.Contains(l, "refused") {
			continue
		}
		lines = append(lines, l)
		if m := re.FindStringSubmatch(l); m != nil {
			n, _ := strconv.Atoi(m[1])
			total += n
		}
	}
	return lines, total
}

// TestRefusedPeersAreSaidOncePerAddress: 600 connections from a client
// without the job's secret are two lines, the first at once and then the
// count; the job's peer pushes its replicas meanwhile.
func TestRefusedPeersAreSaidOncePerAddress(t *testing.T) {
	srv := etcdtest.Start(t)
	cli := srv.Client(t)
	var logs proctest.Buffer
	s := guarded(t, cli, Config{}, &logs)
	peer := genuinePeer(t, cli)

	stop := make(chan struct{})
	pushes := make(chan error, 1)
	go func() {
		var err error
		n := 0
		for ; err == nil; n++ {
			select {
			case <-stop:
				if n < 2 {
					err = fmt.Errorf("%d pushes during the flood", n)
				}
				pushes <- err
				return
			default:
			}
			err = peer.push(t, s, int64(n+1))
		}
		pushes <- err
	}()
	flood(t, s.Addr(), 600, "127.0.0.2")
	close(stop)
	require.NoError(t, <-pushes, "the job's peer pushes during the flood")

	lines, _ := refusedLines(logs.String())
	require.Len(t, lines, 1, "the first refusal is said at once, the rest counted: %s", logs.String())
	assert.Contains(t, lines[0], "peer=127.0.0.2 refusals=1 ")
	s.Close()
	lines, total := refusedLines(logs.String())
	require.Len(t, lines, 2, "%s", logs.String())
	assert.Contains(t, lines[1], "peer=127.0.0.2 refusals=599 ")
	assert.Equal(t, 600, total)
	assert.Equal(t, 2, strings.Count(logs.String(), "[WARN]"), "%s", logs.String())
	for _, l := range lines {
		assert.Regexp(t, `error=`, l)
	}
}

// TestRefusalsOfManyAddressesAreBounded: the addresses counted apart are
// bounded; those beyond are counted together, in one line.
func TestRefusalsOfManyAddressesAreBounded(t *testing.T) {
	srv := etcdtest.Start(t)
	var logs proctest.Buffer
	s := guarded(t, srv.Client(t), Config{}, &logs)
	addrs := 2 * refusedAddresses
	from := make([]string, addrs)
	for i := range from {
		from[i] = fmt.Sprintf("127.0.%d.%d", 1+i/250, 1+i%250)
	}
	flood(t, s.Addr(), 3*addrs, from...)
	s.refusedMu.Lock()
	tracked := len(s.refusals.hosts)
	s.refusedMu.Unlock()
	assert.Equal(t, refusedAddresses, tracked)
	s.Close()

	lines, total := refusedLines(logs.String())
	assert.Equal(t, 3*addrs, total, "every refusal counted")
	// One line at once and one with the rest per address counted apart;
	// the same for the others together.
	assert.Len(t, lines, 2*(refusedAddresses+1), "%s", logs.String())
	overflow := 0
	for _, l := range lines {
		if strings.Contains(l, "beyond those counted apart") {
			overflow++
			assert.Contains(t, l, "last_peer=127.0.")
		}
	}
	assert.Equal(t, 2, overflow)
}

// The rules of when a refused address is said, on a clock of its own.
func TestRefusalsAreSaidOnceAnInterval(t *testing.T) {
	r := newRefusals(time.Minute, 2)
	t0 := time.Unix(1000, 0)
	boom, bang := errors.New("boom"), errors.New("bang")

	l, ok := r.note(t0, "10.0.0.1", boom)
	require.True(t, ok, "the first refusal is said at once")
	assert.Equal(t, refusalLine{host: "10.0.0.1", count: 1, err: boom}, l)
	for i := range 9 {
		_, ok := r.note(t0.Add(time.Duration(i)*time.Second), "10.0.0.1", bang)
		assert.False(t, ok)
	}
	assert.Empty(t, r.due(t0.Add(59*time.Second)))
	assert.Equal(t, []refusalLine{{host: "10.0.0.1", count: 9, err: bang}}, r.due(t0.Add(time.Minute)),
		"the count since, with the last reason")

	// A refusal an interval after the last line is said at once.
	l, ok = r.note(t0.Add(2*time.Minute), "10.0.0.1", boom)
	require.True(t, ok)
	assert.Equal(t, refusalLine{host: "10.0.0.1", count: 1, err: boom}, l)

	// Two addresses are counted apart; a third with the others beyond.
	_, ok = r.note(t0.Add(2*time.Minute), "10.0.0.2", boom)
	assert.True(t, ok)
	l, ok = r.note(t0.Add(2*time.Minute), "10.0.0.3", boom)
	require.True(t, ok)
	assert.Equal(t, refusalLine{host: "10.0.0.3", count: 1, err: boom, overflow: true}, l)
	_, ok = r.note(t0.Add(2*time.Minute), "10.0.0.4", bang)
	assert.False(t, ok)
	assert.Len(t, r.hosts, 2)
	assert.Equal(t, []refusalLine{{host: "10.0.0.4", count: 1, err: bang, overflow: true}}, r.rest(t0.Add(2*time.Minute)))

	// Quiet for an interval: forgotten, and said at once again.
	assert.Empty(t, r.due(t0.Add(3*time.Minute)))
	assert.Empty(t, r.hosts)
	l, ok = r.note(t0.Add(3*time.Minute), "10.0.0.3", boom)
	require.True(t, ok)
	assert.Equal(t, refusalLine{host: "10.0.0.3", count: 1, err: boom}, l)
}

// peerOf is a sidecar of the job, from 127.0.0.1, that holds its secret.
type peerOf struct {
	auth *auth
}

func genuinePeer(t *testing.T, cli *clientv3.Client) peerOf {
	t.Helper()
	secret, err := JobSecret(t.Context(), cli, membership.DefaultKeys(), "job")
	require.NoError(t, err)
	a, err := newAuth("job", secret)
	require.NoError(t, err)
	return peerOf{auth: a}
}

// push pushes a replica of sequence seq to s, as the push loop does, and
// checks that s holds it.
func (p peerOf) push(t *testing.T, s *Service, seq int64) error {
	conn, err := p.auth.dial(t.Context(), s.Addr())
	if err != nil {
		return fmt.Errorf("dial: %w", err)
	}
	defer conn.Close()
	body := []byte(fmt.Sprintf("replica %d", seq))
	c := &Copy{Meta: Meta{Job: "job", Generation: 1, Seq: seq, Node: "b", Size: int64(len(body)), CRC32: checksum(body)}, Body: body}
	if err := push(conn, c); err != nil {
		return fmt.Errorf("push: %w", err)
	}
	if got := s.store.newest("b"); got == nil || got.Seq != seq {
		return fmt.Errorf("replica %d not held", seq)
	}
	return nil
}
