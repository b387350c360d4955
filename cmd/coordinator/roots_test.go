package main

import (
	"crypto/x509"
	"encoding/pem"
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
)

// The image is the binary alone, with no CA bundle: the binary carries
// its own, so that a certificate of a public CA (a registry's, read for an
// image's command) verifies where the system has no roots. A child of the
// test binary checks a public root with the system's bundle pointed away.
func TestTheBinaryVerifiesPublicCertificatesWithoutASystemBundle(t *testing.T) {
	if os.Getenv("ROOTS_CHILD") == "1" {
		data, err := os.ReadFile("testdata/public-root.pem")
		require.NoError(t, err)
		block, _ := pem.Decode(data)
		cert, err := x509.ParseCertificate(block.Bytes)
		require.NoError(t, err)
		_, err = cert.Verify(x509.VerifyOptions{})
		require.NoError(t, err, "a public root with no system bundle")
		return
	}
	empty := t.TempDir()
	child := exec.Command(os.Args[0], "-test.run", "^TestTheBinaryVerifiesPublicCertificatesWithoutASystemBundle$", "-test.count=1")
	child.Env = append(os.Environ(), "ROOTS_CHILD=1", "SSL_CERT_FILE="+empty+"/none.pem", "SSL_CERT_DIR="+empty)
	out, err := child.CombinedOutput()
	require.NoError(t, err, "%s", out)
}
