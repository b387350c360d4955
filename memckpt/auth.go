package memckpt

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"errors"
	"fmt"
	"math/big"
	"net"
	"time"
)

// ErrUnauthenticated is a peer that did not prove it holds the job's secret.
var ErrUnauthenticated = errors.New("memckpt: peer not authenticated")

// ekmLabel names the keying material both ends export from the TLS session
// to bind their proofs to it.
const ekmLabel = "EXPORTER-elastic-checkpoint"

// ephemeralCert is a self-signed certificate for one sidecar's life. It
// gives the channel its encryption; who is at the other end is proven by
// the job's secret, not by the certificate.
func ephemeralCert() (tls.Certificate, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return tls.Certificate{}, err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(1),
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(10 * 365 * 24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.Certificate{Certificate: [][]byte{der}, PrivateKey: key}, nil
}

// proof is side's HMAC, under the job's secret, of the session's keying
// material: it proves the secret to the other end of this session only.
func proof(secret []byte, cs tls.ConnectionState, side string) ([]byte, error) {
	ekm, err := cs.ExportKeyingMaterial(ekmLabel, nil, 32)
	if err != nil {
		return nil, err
	}
	mac := hmac.New(sha256.New, secret)
	mac.Write([]byte(side))
	mac.Write(ekm)
	return mac.Sum(nil), nil
}

// checkProof compares a proof received with the one expected, in constant
// time.
func checkProof(secret []byte, cs tls.ConnectionState, side, got string) error {
	want, err := proof(secret, cs, side)
	if err != nil {
		return err
	}
	b, err := hex.DecodeString(got)
	if err != nil || !hmac.Equal(b, want) {
		return ErrUnauthenticated
	}
	return nil
}

// auth is one job's credentials between its sidecars.
type auth struct {
	job    string
	secret []byte
	server *tls.Config
	client *tls.Config
}

func newAuth(job string, secret []byte) (*auth, error) {
	cert, err := ephemeralCert()
	if err != nil {
		return nil, fmt.Errorf("certificate for checkpoint traffic: %w", err)
	}
	return &auth{
		job: job, secret: secret,
		server: &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS13},
		// The certificate is not what proves the peer: the HMAC is.
		client: &tls.Config{InsecureSkipVerify: true, MinVersion: tls.VersionTLS13}, //nolint:gosec
	}, nil
}

// dial opens an authenticated channel to the sidecar at addr.
func (a *auth) dial(ctx context.Context, addr string) (*tls.Conn, error) {
	d := tls.Dialer{NetDialer: &net.Dialer{Timeout: 5 * time.Second}, Config: a.client}
	raw, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	conn := raw.(*tls.Conn)
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	} else {
		_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	}
	if err := a.hello(conn); err != nil {
		conn.Close()
		return nil, err
	}
	_ = conn.SetDeadline(time.Time{})
	return conn, nil
}

// hello proves the job's secret to the server and checks the server's
// proof.
func (a *auth) hello(conn *tls.Conn) error {
	cs := conn.ConnectionState()
	mine, err := proof(a.secret, cs, "client")
	if err != nil {
		return err
	}
	if err := writeFrame(conn, OpHello, Hello{Job: a.job, Proof: hex.EncodeToString(mine)}, nil); err != nil {
		return err
	}
	var r Reply
	if _, err := readFrame(conn, 0, &r); err != nil {
		return fmt.Errorf("%w: %v", ErrUnauthenticated, err)
	}
	if r.Error != "" {
		return fmt.Errorf("%w: %s", ErrUnauthenticated, r.Error)
	}
	if err := checkProof(a.secret, cs, "server", r.Proof); err != nil {
		return fmt.Errorf("%w: the server's proof does not match", ErrUnauthenticated)
	}
	return nil
}

// accept checks a client's hello on a server connection and answers with
// the server's proof, within the deadline the caller armed on conn when it
// accepted it (Config.HandshakeTimeout), which it then lifts.
func (a *auth) accept(conn *tls.Conn) error {
	if err := conn.Handshake(); err != nil {
		return err
	}
	var h Hello
	hdr, err := readFrame(conn, 0, &h)
	if err != nil {
		return err
	}
	cs := conn.ConnectionState()
	var refusal string
	switch {
	case hdr.Op != OpHello:
		refusal = "say hello first"
	case h.Job != a.job:
		refusal = fmt.Sprintf("this sidecar keeps checkpoints of job %s, not %s", a.job, h.Job)
	case checkProof(a.secret, cs, "client", h.Proof) != nil:
		refusal = "the proof of the job's secret does not match"
	}
	if refusal != "" {
		_ = writeFrame(conn, OpReply, Reply{Error: refusal, Kind: "unauthenticated"}, nil)
		return fmt.Errorf("%w: %s", ErrUnauthenticated, refusal)
	}
	mine, err := proof(a.secret, cs, "server")
	if err != nil {
		return err
	}
	if err := writeFrame(conn, OpReply, Reply{Proof: hex.EncodeToString(mine)}, nil); err != nil {
		return err
	}
	_ = conn.SetDeadline(time.Time{})
	return nil
}
