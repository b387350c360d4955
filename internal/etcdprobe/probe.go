package etcdprobe

import (
	"bufio"
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"regexp"
	"strings"
	"syscall"
	"time"
)

// probeTimeout bounds each step of a probe: an endpoint that answers at
// all answers within it.
const probeTimeout = 2 * time.Second

// errLooksLikeEtcd: the probe found etcd (or could not tell): the client's
// own check decides.
var errLooksLikeEtcd = errors.New("looks like etcd")

// unreachableError: nothing answered, which may change (an etcd still
// starting, a name not yet in DNS), unlike a server that is not etcd.
type unreachableError struct{ why string }

func (e unreachableError) Error() string { return "unreachable: " + e.why }

// Wait says whether Endpoints waits for an etcd nothing answers at.
type Wait bool

const (
	// WaitForEtcd tries again while nothing answers, until the dial
	// timeout: a daemon started beside its etcd waits for it.
	WaitForEtcd Wait = true
	// FailAtOnce reports a refused connection or an unknown host at once:
	// a command a person typed says so without making them wait.
	FailAtOnce Wait = false
)

// Endpoints probes each endpoint until one may be etcd, and returns the
// first that may be. cfg is the TLS configuration for https endpoints
// (nil: TLS 1.2 or later with the system's roots); timeout is the client's
// dial timeout, which bounds each probe's steps. While nothing answers at
// all it tries again until timeout has passed if wait says so, as the
// client would, so that a sidecar started beside its etcd waits for it; a
// server that answers as something else is an error at once.
func Endpoints(ctx context.Context, endpoints []string, cfg *tls.Config, timeout time.Duration, wait Wait) (string, error) {
	deadline := time.Now().Add(timeout)
	for {
		var err error
		for _, e := range endpoints {
			if err = probeEndpoint(ctx, e, cfg, time.Until(deadline)); errors.Is(err, errLooksLikeEtcd) {
				return e, nil
			}
		}
		var unreachable unreachableError
		if !bool(wait) || !errors.As(err, &unreachable) || time.Until(deadline) < probeRetry {
			return "", err
		}
		select {
		case <-ctx.Done():
			return "", err
		case <-time.After(probeRetry):
		}
	}
}

// httpStatusLine is the protocol at the start of an HTTP status line.
var httpStatusLine = regexp.MustCompile(`^HTTP/[0-9.]+ `)

// probeRetry is the pause between probes of endpoints nothing answers at.
const probeRetry = 200 * time.Millisecond

// Validate reports an endpoint that is neither HOST:PORT nor a URL with a
// host and a port, such as http://HOST:2379.
func Validate(endpoint string) error {
	hostport := endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		if u.Scheme != "http" && u.Scheme != "https" {
			return nil // unix sockets and the like: the client checks
		}
		hostport = u.Host
		if u.Port() == "" {
			return fmt.Errorf("%q has no port: want a URL such as http://HOST:2379", endpoint)
		}
	}
	if _, _, err := net.SplitHostPort(hostport); err != nil {
		return fmt.Errorf("%q is not HOST:PORT or a URL such as http://HOST:2379", endpoint)
	}
	return nil
}

// probeEndpoint finds out quickly what answers at an etcd endpoint, so
// that a wrong port, a TLS mismatch or another server is one specific line
// at once rather than a timeout. It returns errLooksLikeEtcd when etcd
// answers (or it cannot tell), and otherwise an error that says what is
// wrong.
func probeEndpoint(ctx context.Context, endpoint string, cfg *tls.Config, timeout time.Duration) error {
	scheme, hostport := "http", endpoint
	if u, err := url.Parse(endpoint); err == nil && u.Host != "" {
		scheme, hostport = u.Scheme, u.Host
	}
	if scheme != "http" && scheme != "https" {
		return errLooksLikeEtcd // unix sockets and the like: the client checks
	}
	host, _, err := net.SplitHostPort(hostport)
	if err != nil {
		return fmt.Errorf("%q is not HOST:PORT or a URL such as http://HOST:2379", endpoint)
	}
	step := min(max(timeout, 50*time.Millisecond), probeTimeout) // a dialer's 0 would be no limit
	conn, err := (&net.Dialer{Timeout: step}).DialContext(ctx, "tcp", hostport)
	if err != nil {
		var dns *net.DNSError
		switch {
		case errors.Is(err, syscall.ECONNREFUSED):
			return unreachableError{fmt.Sprintf("connection refused (nothing listens on %s)", hostport)}
		case errors.As(err, &dns):
			return unreachableError{fmt.Sprintf("host %s not found", host)}
		case errors.Is(err, context.DeadlineExceeded), isTimeout(err):
			return unreachableError{fmt.Sprintf("no answer from %s within %s", hostport, step)}
		}
		return unreachableError{err.Error()}
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(step))
	if scheme == "https" {
		c := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg != nil {
			c = cfg.Clone()
		}
		if c.ServerName == "" {
			c.ServerName = host
		}
		c.NextProtos = []string{"http/1.1"}
		tc := tls.Client(conn, c)
		if err := tc.HandshakeContext(ctx); err != nil {
			return explainHandshake(hostport, err)
		}
		conn = tc
	}
	fmt.Fprintf(conn, "GET /version HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", hostport)
	answer, err := io.ReadAll(bufio.NewReader(io.LimitReader(conn, 4096)))
	if len(answer) == 0 {
		if err != nil && scheme == "https" && !isTimeout(err) {
			// TLS 1.3 tells of a refused client certificate after the
			// handshake, on the first read.
			if explained := explainHandshake(hostport, err); !strings.HasPrefix(explained.Error(), "TLS with") {
				return explained
			}
		}
		if scheme == "http" && speaksTLS(ctx, hostport, step) {
			return fmt.Errorf("%s speaks TLS: use https://%s (with --cacert for its CA)", hostport, hostport)
		}
		if err != nil && isTimeout(err) {
			if scheme == "http" {
				return fmt.Errorf("%s accepted the connection but does not answer as etcd does: it is not etcd, or it wants TLS (then use https://)", hostport)
			}
			return fmt.Errorf("%s does not answer as etcd does", hostport)
		}
		return errLooksLikeEtcd
	}
	text := string(answer)
	switch {
	case len(answer) >= 2 && answer[0] == 0x15 && answer[1] == 0x03,
		strings.Contains(text, "HTTP request to an HTTPS server"):
		return fmt.Errorf("%s speaks TLS: use https://%s (with --cacert for its CA)", hostport, hostport)
	case strings.Contains(text, "etcdserver"):
		return errLooksLikeEtcd
	case strings.HasPrefix(text, "HTTP/"):
		status, _, _ := strings.Cut(text, "\r\n")
		server := ""
		for _, line := range strings.Split(text, "\r\n") {
			if k, v, ok := strings.Cut(line, ":"); ok && strings.EqualFold(k, "Server") {
				server = ", server " + strings.TrimSpace(v)
			}
		}
		return fmt.Errorf("%s is an HTTP server, not etcd (GET /version answered %q%s)", hostport, httpStatusLine.ReplaceAllString(status, ""), server)
	}
	first, _, _ := strings.Cut(text, "\n")
	return fmt.Errorf("%s is not etcd: it answered %q", hostport, strings.TrimSpace(first))
}

// speaksTLS reports whether a TLS handshake with hostport gets as far as
// the server's certificate: it is a TLS server, whichever its CA.
func speaksTLS(ctx context.Context, hostport string, timeout time.Duration) bool {
	conn, err := (&net.Dialer{Timeout: timeout}).DialContext(ctx, "tcp", hostport)
	if err != nil {
		return false
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(timeout))
	seen := false
	tc := tls.Client(conn, &tls.Config{
		InsecureSkipVerify: true, // only whether it speaks TLS; nothing is sent
		VerifyPeerCertificate: func([][]byte, [][]*x509.Certificate) error {
			seen = true
			return errors.New("seen")
		},
	})
	_ = tc.HandshakeContext(ctx)
	return seen
}

// explainHandshake says why a TLS handshake with an endpoint failed.
func explainHandshake(hostport string, err error) error {
	var unknown x509.UnknownAuthorityError
	var hostname x509.HostnameError
	var record tls.RecordHeaderError
	msg := err.Error()
	switch {
	case errors.As(err, &record), errors.Is(err, io.EOF), errors.Is(err, syscall.ECONNRESET):
		return fmt.Errorf("%s does not speak TLS: use http://%s", hostport, hostport)
	case errors.As(err, &unknown):
		return fmt.Errorf("TLS: the certificate of %s is not signed by a CA this side trusts: give its CA with --cacert", hostport)
	case errors.As(err, &hostname):
		return fmt.Errorf("TLS: the certificate of %s is not for that name (%v)", hostport, hostname)
	case strings.Contains(msg, "bad certificate"), strings.Contains(msg, "certificate required"), strings.Contains(msg, "unknown certificate authority"):
		return fmt.Errorf("TLS: %s refused this side's client certificate: give one it trusts with --cert and --key", hostport)
	case isTimeout(err):
		return fmt.Errorf("%s accepted the connection but did not complete a TLS handshake: it is not etcd, or does not speak TLS", hostport)
	}
	return fmt.Errorf("TLS with %s: %v", hostport, err)
}

func isTimeout(err error) bool {
	var ne net.Error
	return errors.As(err, &ne) && ne.Timeout()
}
