//go:build !sidecaronly

package main

import (
	"bytes"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"

	"github.com/elastictraining/coordinator/internal/pki"
)

// Names of the Secrets `certs` writes, as deploy/ mounts them.
const (
	secretEtcdServer  = "elastic-etcd-server"
	secretEtcdPeer    = "elastic-etcd-peer"
	secretCoordinator = "elastic-coordinator-etcd"
	secretSidecar     = "elastic-sidecar-etcd"
)

type certsOptions struct {
	out       string
	namespace string
	service   string
	members   int
	validity  time.Duration
	hosts     []string
}

func newCertsCommand(lookupEnv) *cobra.Command {
	o := &certsOptions{}
	cmd := &cobra.Command{
		Use:   "certs --out DIR [flags]",
		Short: "Make the certificates of a deployment: a CA, etcd's, the coordinator's and the sidecars'",
		Long: `certs makes a CA and, signed by it, everything mutual TLS with etcd needs:

  etcd-server    the etcd members' serving certificate (every member's DNS name)
  etcd-peer      the members' certificate between themselves
  coordinator    the coordinator's client certificate, CN root: etcd's root
                 user when auth is on
  sidecar        the sidecars' client certificate, CN elastic-sidecar, a name
                 with no rights: with auth on, a sidecar acts as its job's user

each as NAME.crt and NAME.key in DIR with ca.crt and ca.key, and
secrets.yaml: the namespace and the Kubernetes Secrets deploy/ mounts. Apply it before deploy/;
keep ca.key out of the cluster, to issue more later.`,
		Example: `  coordinator certs --out certs/ && kubectl apply -f certs/secrets.yaml && kubectl apply -k deploy/`,
		Args:    cobra.NoArgs,
		RunE:    func(cmd *cobra.Command, _ []string) error { return o.run(cmd) },
	}
	fs := cmd.Flags()
	fs.StringVar(&o.out, "out", "", "directory to write to (created)")
	fs.StringVar(&o.namespace, "namespace", "elastic-system", "namespace of etcd, the coordinator and the jobs")
	fs.StringVar(&o.service, "etcd-service", "elastic-etcd", "the etcd StatefulSet's headless Service")
	fs.IntVar(&o.members, "etcd-members", 3, "etcd members (pods SERVICE-0 ... SERVICE-N-1)")
	fs.DurationVar(&o.validity, "validity", 365*24*time.Hour, "how long the certificates are valid")
	fs.StringSliceVar(&o.hosts, "etcd-host", nil, "more names or addresses etcd is reached at (repeatable)")
	checkGiven(fs, "namespace", func() error { return checkKubeName("--namespace", o.namespace, dns1123Label) })
	checkGiven(fs, "etcd-service", func() error { return checkKubeName("--etcd-service", o.service, dns1123Label) })
	checkGiven(fs, "etcd-host", func() error {
		for _, h := range o.hosts {
			if err := checkHost("--etcd-host", strings.TrimPrefix(h, "*.")); err != nil {
				return err
			}
		}
		return nil
	})
	return cmd
}

func (o *certsOptions) run(cmd *cobra.Command) error {
	switch {
	case o.out == "":
		return usagef("--out: a directory to write the certificates to")
	case o.members < 1 || o.members > 9:
		return usagef("--etcd-members %d: want 1..9", o.members)
	case o.validity < time.Hour:
		return usagef("--validity %s: at least an hour", o.validity)
	}
	if err := os.MkdirAll(o.out, 0o700); err != nil {
		return err
	}
	ca, err := pki.NewCA("elastic-coordinator CA", o.validity)
	if err != nil {
		return err
	}
	var dns []string
	var ips []net.IP
	for _, name := range []string{o.service, o.service + "." + o.namespace, o.service + "." + o.namespace + ".svc"} {
		dns = append(dns, name)
		for i := range o.members {
			dns = append(dns, fmt.Sprintf("%s-%d.%s", o.service, i, name))
		}
	}
	dns = append(dns, "localhost")
	ips = append(ips, net.ParseIP("127.0.0.1"))
	for _, h := range o.hosts {
		if ip := net.ParseIP(h); ip != nil {
			ips = append(ips, ip)
		} else {
			dns = append(dns, h)
		}
	}
	issued := map[string]pki.Pair{}
	for name, req := range map[string]pki.Request{
		"etcd-server": {CommonName: o.service, DNSNames: dns, IPs: ips, Server: true},
		"etcd-peer":   {CommonName: o.service + "-peer", DNSNames: dns, IPs: ips, Server: true, Client: true},
		"coordinator": {CommonName: "root", Client: true},
		"sidecar":     {CommonName: "elastic-sidecar", Client: true},
	} {
		if issued[name], err = ca.Issue(req, o.validity); err != nil {
			return err
		}
	}
	files := map[string][]byte{"ca.crt": ca.CertPEM, "ca.key": ca.KeyPEM}
	for name, p := range issued {
		files[name+".crt"], files[name+".key"] = p.CertPEM, p.KeyPEM
	}
	// The namespace first: the Secrets are applied before deploy/, which
	// makes the same namespace, on a cluster that has none yet.
	var secrets bytes.Buffer
	ns, err := yaml.Marshal(&corev1.Namespace{
		TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Namespace"},
		ObjectMeta: metav1.ObjectMeta{Name: o.namespace},
	})
	if err != nil {
		return err
	}
	secrets.WriteString("---\n")
	secrets.Write(cleanMeta(ns))
	for _, s := range []struct{ name, pair string }{
		{secretEtcdServer, "etcd-server"}, {secretEtcdPeer, "etcd-peer"}, {secretCoordinator, "coordinator"}, {secretSidecar, "sidecar"},
	} {
		data, err := yaml.Marshal(&corev1.Secret{
			TypeMeta:   metav1.TypeMeta{APIVersion: "v1", Kind: "Secret"},
			ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: o.namespace, Labels: map[string]string{"app.kubernetes.io/part-of": "elastic-coordinator"}},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{"ca.crt": ca.CertPEM, "tls.crt": issued[s.pair].CertPEM, "tls.key": issued[s.pair].KeyPEM},
		})
		if err != nil {
			return err
		}
		secrets.WriteString("---\n")
		secrets.Write(cleanMeta(data))
	}
	files["secrets.yaml"] = secrets.Bytes()
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(o.out, name), data, 0o600); err != nil {
			return err
		}
	}
	fmt.Fprintf(cmd.OutOrStdout(), "wrote %d files to %s; apply %s before deploy/\n", len(files), o.out, filepath.Join(o.out, "secrets.yaml"))
	return nil
}

// cleanMeta drops the empty fields a marshalled object carries: a null
// creationTimestamp, an empty spec and status.
func cleanMeta(data []byte) []byte {
	for _, empty := range []string{"  creationTimestamp: null\n", "spec: {}\n", "status: {}\n"} {
		data = bytes.Replace(data, []byte(empty), nil, 1)
	}
	return data
}
