package kubetest

import (
	"context"
	"crypto/rand"
	"crypto/rsa"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/pem"
	"errors"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"

	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/launcher"
)

// Binaries the cluster and its users need, in BinDir.
var Binaries = []string{"kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kubectl"}

// ErrNoBinaries is returned when the control plane has not been built.
var ErrNoBinaries = errors.New("kubetest: Kubernetes binaries missing; run `make kube-tools`")

// BinDir finds bin/ of the repository: KUBE_BIN_DIR, or bin/ in the first
// parent of the working directory that has a go.mod.
func BinDir() string {
	if d := os.Getenv("KUBE_BIN_DIR"); d != "" {
		return d
	}
	dir, _ := os.Getwd()
	for dir != "/" {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return filepath.Join(dir, "bin")
		}
		dir = filepath.Dir(dir)
	}
	return "bin"
}

// Cluster is a running control plane.
type Cluster struct {
	dir        string
	etcd       *embedetcd.Server
	procs      []*exec.Cmd
	waits      []<-chan error
	Server     string // https://127.0.0.1:PORT
	AdminToken string
	// Kubeconfig is an admin kubeconfig file.
	Kubeconfig string
	Config     *rest.Config
	Client     kubernetes.Interface

	kueueOnce sync.Once
	kueueErr  error
}

// Start runs a control plane in dir; Stop stops it.
func Start(ctx context.Context, dir string) (c *Cluster, err error) {
	bin := BinDir()
	for _, b := range Binaries {
		if _, err := os.Stat(filepath.Join(bin, b)); err != nil {
			return nil, fmt.Errorf("%w (%s)", ErrNoBinaries, filepath.Join(bin, b))
		}
	}
	c = &Cluster{dir: dir}
	defer func() {
		if err != nil {
			c.Stop()
		}
	}()
	if c.etcd, err = embedetcd.Start(ctx, embedetcd.Config{
		DataDir: filepath.Join(dir, "etcd"), LogFile: filepath.Join(dir, "etcd.log"), UnsafeNoFsync: true,
	}); err != nil {
		return nil, err
	}
	saKey, saPub := filepath.Join(dir, "sa.key"), filepath.Join(dir, "sa.pub")
	if err := writeServiceAccountKeys(saKey, saPub); err != nil {
		return nil, err
	}
	c.AdminToken = randomToken()
	tokens := filepath.Join(dir, "tokens.csv")
	if err := os.WriteFile(tokens, []byte(c.AdminToken+",admin,admin,system:masters\n"), 0o600); err != nil {
		return nil, err
	}
	port, err := embedetcd.FreePort("127.0.0.1")
	if err != nil {
		return nil, err
	}
	c.Server = "https://127.0.0.1:" + strconv.Itoa(port)
	if err := c.run(bin, "kube-apiserver",
		"--etcd-servers="+c.etcd.ClientURL(), "--secure-port="+strconv.Itoa(port), "--bind-address=127.0.0.1",
		"--cert-dir="+filepath.Join(dir, "certs"), "--service-account-issuer=https://localhost",
		"--service-account-key-file="+saPub, "--service-account-signing-key-file="+saKey,
		"--token-auth-file="+tokens, "--authorization-mode=RBAC", "--service-cluster-ip-range=10.0.0.0/24",
		"--disable-admission-plugins=ServiceAccount"); err != nil {
		return nil, err
	}
	if err := c.waitReady(ctx); err != nil {
		return nil, err
	}
	c.Kubeconfig = filepath.Join(dir, "admin.kubeconfig")
	if err := WriteKubeconfig(c.Kubeconfig, c.Server, c.AdminToken); err != nil {
		return nil, err
	}
	if c.Config, err = clientcmd.BuildConfigFromFlags("", c.Kubeconfig); err != nil {
		return nil, err
	}
	// Tests and benchmarks poll; client-go's default limit of 5 requests a
	// second would make them wait on themselves.
	c.Config.QPS = -1
	if c.Client, err = kubernetes.NewForConfig(c.Config); err != nil {
		return nil, err
	}
	schedulerConfig := filepath.Join(dir, "scheduler.yaml")
	if err := writeSchedulerConfig(schedulerConfig, c.Kubeconfig); err != nil {
		return nil, err
	}
	for _, p := range []struct {
		name string
		args []string
	}{
		{"kube-controller-manager", []string{"--kubeconfig=" + c.Kubeconfig, "--leader-elect=false",
			"--controllers=*,-nodeipam,-serviceaccount-token", "--service-account-private-key-file=" + saKey, "--secure-port=0"}},
		{"kube-scheduler", []string{"--config=" + schedulerConfig, "--secure-port=0"}},
		{"kwok", []string{"--kubeconfig=" + c.Kubeconfig, "--manage-all-nodes=false",
			"--manage-nodes-with-annotation-selector=kwok.x-k8s.io/node=fake", "--node-ip=10.0.0.1", "--cidr=10.0.0.1/24",
			"--server-address=127.0.0.1:0",
			// Heartbeats by node Lease, as kubelets do: kwok's status
			// heartbeat (20 s plus up to 25 s of jitter) came later than the
			// node lifecycle controller's 50 s grace for some of 133 nodes
			// under load, which marked their pods not Ready and tainted the
			// nodes, and a ReplicaSet scaling down deletes pods not Ready
			// first.
			"--node-lease-duration-seconds=40"}},
	} {
		if err := c.run(bin, p.name, p.args...); err != nil {
			return nil, err
		}
	}
	if err := c.addFakeNode(ctx); err != nil {
		return nil, err
	}
	return c, nil
}

// BinPackingScheduler is the scheduler profile that packs pods onto the
// fullest nodes they fit (NodeResourcesFit's MostAllocated on CPU, with
// the spreading scores off), as a cluster of batch jobs is set up to keep
// whole nodes free for large pods. Pods choose it with spec.schedulerName;
// the others get the default profile.
const BinPackingScheduler = "bin-packing"

// writeSchedulerConfig writes kube-scheduler's configuration: the default
// profile, and BinPackingScheduler.
func writeSchedulerConfig(file, kubeconfig string) error {
	config := `apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
clientConnection:
  kubeconfig: ` + strconv.Quote(kubeconfig) + `
leaderElection:
  leaderElect: false
profiles:
  - schedulerName: default-scheduler
  - schedulerName: ` + BinPackingScheduler + `
    plugins:
      score:
        disabled:
          - name: NodeResourcesBalancedAllocation
          - name: PodTopologySpread
    pluginConfig:
      - name: NodeResourcesFit
        args:
          scoringStrategy:
            type: MostAllocated
            resources:
              - {name: cpu, weight: 1}
`
	return os.WriteFile(file, []byte(config), 0o600)
}

// run starts a component with its output in the cluster's directory.
func (c *Cluster) run(bin, name string, args ...string) error {
	log, err := os.Create(filepath.Join(c.dir, name+".log"))
	if err != nil {
		return err
	}
	cmd := exec.Command(filepath.Join(bin, name), args...)
	cmd.Stdout, cmd.Stderr = log, log
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	wait, err := launcher.Spawn(cmd)
	if err != nil {
		log.Close()
		return fmt.Errorf("start %s: %w", name, err)
	}
	c.procs = append(c.procs, cmd)
	c.waits = append(c.waits, wait)
	return nil
}

// Kubectl runs kubectl against the cluster as its admin, in dir (the
// working directory, for relative paths), with stdin as its input, and
// returns what it printed: what a user at a terminal would do and see.
func (c *Cluster) Kubectl(ctx context.Context, dir, stdin string, args ...string) (stdout, stderr string, err error) {
	cmd := exec.CommandContext(ctx, filepath.Join(BinDir(), "kubectl"), append([]string{"--kubeconfig", c.Kubeconfig}, args...)...)
	cmd.Dir = dir
	cmd.Stdin = strings.NewReader(stdin)
	var out, errOut strings.Builder
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	return out.String(), errOut.String(), err
}

// waitReady waits for the API server's /readyz.
func (c *Cluster) waitReady(ctx context.Context) error {
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{
		TLSClientConfig: &tls.Config{InsecureSkipVerify: true}, // the server's own self-signed certificate
	}}
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, c.Server+"/readyz", nil)
		req.Header.Set("Authorization", "Bearer "+c.AdminToken)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case err := <-c.waits[0]:
			return fmt.Errorf("kube-apiserver exited (%v); see %s", err, filepath.Join(c.dir, "kube-apiserver.log"))
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(200 * time.Millisecond):
		}
	}
	return fmt.Errorf("kube-apiserver not ready after 90s; see %s", filepath.Join(c.dir, "kube-apiserver.log"))
}

// addFakeNode registers a node that kwok runs pods on.
func (c *Cluster) addFakeNode(ctx context.Context) error {
	qty := func(s string) resource.Quantity { return resource.MustParse(s) }
	capacity := corev1.ResourceList{corev1.ResourceCPU: qty("1000"), corev1.ResourceMemory: qty("4Ti"), corev1.ResourcePods: qty("1000"),
		"nvidia.com/gpu": qty("1000")}
	node := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        "kwok-node-0",
			Annotations: map[string]string{"kwok.x-k8s.io/node": "fake", "node.alpha.kubernetes.io/ttl": "0"},
			Labels:      map[string]string{"type": "kwok", "kubernetes.io/hostname": "kwok-node-0"},
		},
		Status: corev1.NodeStatus{Allocatable: capacity, Capacity: capacity},
	}
	_, err := c.Client.CoreV1().Nodes().Create(ctx, node, metav1.CreateOptions{})
	return err
}

// Stop stops every component and the etcd under it.
func (c *Cluster) Stop() {
	for i := len(c.procs) - 1; i >= 0; i-- {
		_ = c.procs[i].Process.Signal(syscall.SIGTERM)
		select {
		case <-c.waits[i]:
		case <-time.After(10 * time.Second):
			_ = c.procs[i].Process.Kill()
			<-c.waits[i]
		}
	}
	if c.etcd != nil {
		c.etcd.Close()
	}
}

// WriteKubeconfig writes a kubeconfig for server with a bearer token.
func WriteKubeconfig(file, server, token string) error {
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["test"] = &clientcmdapi.Cluster{Server: server, InsecureSkipTLSVerify: true}
	cfg.AuthInfos["user"] = &clientcmdapi.AuthInfo{Token: token}
	cfg.Contexts["test"] = &clientcmdapi.Context{Cluster: "test", AuthInfo: "user"}
	cfg.CurrentContext = "test"
	return clientcmd.WriteToFile(*cfg, file)
}

func writeServiceAccountKeys(keyFile, pubFile string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	return os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600)
}

func randomToken() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// Logs returns the tail of a component's log, for a failing test.
func (c *Cluster) Logs(name string, lines int) string {
	data, _ := os.ReadFile(filepath.Join(c.dir, name+".log"))
	all := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
	if len(all) > lines {
		all = all[len(all)-lines:]
	}
	return strings.Join(all, "\n")
}
