package kubetest

import (
	"bytes"
	"context"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/dynamic"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/pki"
)

// KueueFrameworks are the job kinds Kueue is told external controllers
// manage (integrations.externalFrameworks): the coordinator's.
var KueueFrameworks = []string{"ElasticJob.v1.elastictraining.io", "PaddleJob.v1.batch.paddlepaddle.org", "MSJob.v1.mindspore.gitee.com"}

// ErrNoKueue is returned when Kueue's manager has not been built.
var ErrNoKueue = errors.New("kubetest: Kueue missing; run `make kube-tools`")

// kueueMetricsCerts is where Kueue's manager, its own certificate
// management off, reads its metrics server's certificate: a path its main
// hard-codes (cmd/kueue/main.go, v0.19.2), read even with metrics off.
const kueueMetricsCerts = "/etc/kueue/metrics/certs"

// StartKueue runs Kueue's controller manager (bin/kueue, built from its
// pinned source) against the cluster, once: its CRDs (bin/kueue-crds),
// the namespace kueue-system, and the manager as a plain process with
// the coordinator's kinds as external frameworks, its certificates
// self-signed. Its webhooks for Kueue's own objects (Workloads,
// ClusterQueues, ResourceFlavors, Cohorts) are registered with the API
// server at the manager's address, as its manifests register them: the
// Workloads the coordinator writes are checked as a cluster checks them.
func (c *Cluster) StartKueue(ctx context.Context) error {
	c.kueueOnce.Do(func() { c.kueueErr = c.startKueue(ctx) })
	return c.kueueErr
}

func (c *Cluster) startKueue(ctx context.Context) error {
	bin := BinDir()
	crdDir := filepath.Join(bin, "kueue-crds")
	webhooks := filepath.Join(bin, "kueue-webhooks.yaml")
	for _, p := range []string{filepath.Join(bin, "kueue"), crdDir, webhooks} {
		if _, err := os.Stat(p); err != nil {
			return fmt.Errorf("%w (%s)", ErrNoKueue, p)
		}
	}
	dyn, err := dynamic.NewForConfig(c.Config)
	if err != nil {
		return err
	}
	if err := createCRDs(ctx, dyn, crdDir); err != nil {
		return err
	}
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kueue-system"}},
		metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	dir := filepath.Join(c.dir, "kueue")
	certDir := filepath.Join(dir, "certs")
	ca, err := writeServingPair(certDir, false)
	if err != nil {
		return err
	}
	if _, err := writeServingPair(kueueMetricsCerts, true); err != nil {
		return fmt.Errorf("kueue's metrics certificate at %s (its manager reads it there): %w", kueueMetricsCerts, err)
	}
	webhookPort, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	healthPort, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return err
	}
	config := filepath.Join(dir, "config.yaml")
	if err := os.WriteFile(config, []byte(kueueConfig(webhookPort, healthPort, certDir)), 0o600); err != nil {
		return err
	}
	if err := c.run(bin, "kueue", "--config="+config, "--kubeconfig="+c.Kubeconfig, "--zap-log-level=2"); err != nil {
		return err
	}
	wait := c.waits[len(c.waits)-1]
	health := "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(healthPort)) + "/readyz"
	deadline := time.Now().Add(2 * time.Minute)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(health); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return registerWebhooks(ctx, dyn, webhooks, "https://"+net.JoinHostPort("127.0.0.1", strconv.Itoa(webhookPort)), ca)
			}
		}
		select {
		case err := <-wait:
			return fmt.Errorf("kueue exited (%v):\n%s", err, c.Logs("kueue", 20))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kueue not ready after 2m:\n%s", c.Logs("kueue", 20))
}

// kueueConfig is the manager's configuration: no leader election, no
// certificate management of its own (it needs the in-cluster Service and
// Secret), no visibility server, its webhook and health ports free ones.
func kueueConfig(webhookPort, healthPort int, certDir string) string {
	return fmt.Sprintf(`apiVersion: config.kueue.x-k8s.io/v1beta2
kind: Configuration
namespace: kueue-system
leaderElection:
  leaderElect: false
internalCertManagement:
  enable: false
health:
  healthProbeBindAddress: "127.0.0.1:%d"
metrics:
  bindAddress: "0"
webhook:
  host: 127.0.0.1
  port: %d
  certDir: %q
featureGates:
  VisibilityOnDemand: false
integrations:
  frameworks: ["batch/job"]
  externalFrameworks: [%s]
`, healthPort, webhookPort, certDir, strings.Join(KueueFrameworks, ", "))
}

// writeServingPair writes a serving certificate for 127.0.0.1 as tls.crt
// and tls.key in dir, and returns its CA's certificate; keep leaves a pair
// already there.
func writeServingPair(dir string, keep bool) ([]byte, error) {
	if _, err := os.Stat(filepath.Join(dir, "tls.key")); err == nil && keep {
		return nil, nil
	}
	ca, err := pki.NewCA("kubetest-kueue", 24*time.Hour)
	if err != nil {
		return nil, err
	}
	pair, err := ca.Issue(pki.Request{CommonName: "kueue", IPs: []net.IP{net.IPv4(127, 0, 0, 1)}, DNSNames: []string{"localhost"}, Server: true}, 24*time.Hour)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// Whole files only: a manager starting beside this one reads them.
	for name, data := range map[string][]byte{"tls.crt": append(pair.CertPEM, ca.CertPEM...), "tls.key": pair.KeyPEM} {
		tmp := filepath.Join(dir, "."+name+".tmp")
		if err := os.WriteFile(tmp, data, 0o600); err != nil {
			return nil, err
		}
		if err := os.Rename(tmp, filepath.Join(dir, name)); err != nil {
			return nil, err
		}
	}
	return ca.CertPEM, nil
}

// registerWebhooks registers, from Kueue's webhook manifests (file), the
// webhooks of Kueue's own objects, at the manager's address base with
// the CA that signed its certificate. The other webhooks (pods,
// StatefulSets, the frameworks' jobs) are left out: Kueue's integrations
// of those kinds are not this cluster's.
func registerWebhooks(ctx context.Context, dyn dynamic.Interface, file, base string, ca []byte) error {
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	dec := yaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 1<<20)
	for {
		var obj unstructured.Unstructured
		if err := dec.Decode(&obj.Object); err != nil {
			if errors.Is(err, io.EOF) {
				return nil
			}
			return fmt.Errorf("%s: %w", file, err)
		}
		if len(obj.Object) == 0 {
			continue
		}
		hooks, _, _ := unstructured.NestedSlice(obj.Object, "webhooks")
		var kept []any
		for _, h := range hooks {
			m, ok := h.(map[string]any)
			if !ok {
				continue
			}
			path, _, _ := unstructured.NestedString(m, "clientConfig", "service", "path")
			if !strings.Contains(path, "-kueue-x-k8s-io-") {
				continue
			}
			m["clientConfig"] = map[string]any{"url": base + path, "caBundle": base64.StdEncoding.EncodeToString(ca)}
			kept = append(kept, m)
		}
		if err := unstructured.SetNestedSlice(obj.Object, kept, "webhooks"); err != nil {
			return err
		}
		obj.SetName("kueue-" + obj.GetName())
		gvr := schema.GroupVersionResource{Group: "admissionregistration.k8s.io", Version: "v1",
			Resource: strings.ToLower(obj.GetKind()) + "s"}
		if _, err := dyn.Resource(gvr).Create(ctx, &obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("register Kueue's %s: %w", obj.GetKind(), err)
		}
	}
}

// createCRDs creates every CRD of the YAML files in dir and waits until
// each is established.
func createCRDs(ctx context.Context, dyn dynamic.Interface, dir string) error {
	res := dyn.Resource(schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"})
	var names []string
	err := filepath.WalkDir(dir, func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(path, ".yaml") {
			return err
		}
		f, err := os.Open(path)
		if err != nil {
			return err
		}
		defer f.Close()
		var obj unstructured.Unstructured
		if err := yaml.NewYAMLOrJSONDecoder(f, 1<<20).Decode(&obj.Object); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
		if obj.GetKind() != "CustomResourceDefinition" {
			return nil
		}
		// Created, not applied: the Workload CRD is past the 256 KiB of
		// the last-applied annotation.
		if _, err := res.Create(ctx, &obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create CRD %s: %w", obj.GetName(), err)
		}
		names = append(names, obj.GetName())
		return nil
	})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(time.Minute)
	for _, name := range names {
		for {
			crd, err := res.Get(ctx, name, metav1.GetOptions{})
			if err == nil && established(crd) {
				break
			}
			if time.Now().After(deadline) {
				return fmt.Errorf("CRD %s was never established", name)
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	return nil
}

func established(crd *unstructured.Unstructured) bool {
	conds, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
	for _, c := range conds {
		if m, ok := c.(map[string]any); ok && m["type"] == "Established" && m["status"] == "True" {
			return true
		}
	}
	return false
}
