package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/bench/internal/stats"
	"github.com/elastictraining/coordinator/internal/embedetcd"
	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/testkit/kubetest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/operatorbridge"
	"github.com/elastictraining/coordinator/trainerenv"
)

func main() {
	binary := flag.String("coordinator", "bin/coordinator", "the coordinator binary")
	sizes := flag.String("replicas", "4,64", "sizes to scale to, each from half of it")
	runs := flag.Int("runs", 5, "measurements per size")
	out := flag.String("out", "", "also write the table here")
	ejWorkers := flag.Int("elasticjob-workers", 4, "workers of the ElasticJob measured")
	ejRuns := flag.Int("elasticjob-runs", 10, "ElasticJobs created, scaled and deleted")
	kueueRuns := flag.Int("kueue-runs", 5, "queued ElasticJobs admitted and preempted, on Kueue")
	flag.Parse()
	self, _ := filepath.Abs(*binary)

	dir, err := os.MkdirTemp("", "bench-kube-")
	check(err)
	defer os.RemoveAll(dir)
	ctx := context.Background()
	cluster, err := kubetest.Start(ctx, filepath.Join(dir, "cluster"))
	check(err)
	defer cluster.Stop()

	var rows []row
	for _, s := range strings.Split(*sizes, ",") {
		n, err := strconv.Atoi(s)
		if err != nil || n < 2 {
			fatalf("-replicas %q: want sizes like 4,64", *sizes)
		}
		r, err := measure(ctx, cluster, self, filepath.Join(dir, s), n, *runs)
		check(err)
		rows = append(rows, r...)
	}
	var b strings.Builder
	tw := tabwriter.NewWriter(&b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "SCALE\tRUNS\tPODS RUNNING (MEDIAN)\tCONFIGMAP UPDATED (MEDIAN)\tCONFIGMAP (MIN)\tCONFIGMAP (MAX)")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\t%s\n", r.name, len(r.cm), stats.Ms(stats.Median(r.pods)), stats.Ms(stats.Median(r.cm)), stats.Ms(stats.Quantile(r.cm, 0)), stats.Ms(stats.Quantile(r.cm, 1)))
	}
	tw.Flush()
	if *ejRuns > 0 {
		ej, err := measureElasticJobs(ctx, cluster, self, filepath.Join(dir, "elasticjob"), *ejWorkers, *ejRuns)
		check(err)
		timingTable(&b, "ELASTICJOB (every trainer running)", []timingRow{
			{fmt.Sprintf("create (kubectl apply), %d workers", *ejWorkers), ej.apply},
			{fmt.Sprintf("scale subresource %d → %d", *ejWorkers, *ejWorkers/2), ej.down},
			{fmt.Sprintf("scale subresource %d → %d", *ejWorkers/2, *ejWorkers), ej.up},
			{fmt.Sprintf("graceful pod delete (kubectl delete pod), %d workers", *ejWorkers), ej.podDelete},
		})
	}
	if *kueueRuns > 0 {
		kq, err := measureKueue(ctx, cluster, self, filepath.Join(dir, "kueue"), *ejWorkers, *kueueRuns)
		check(err)
		timingTable(&b, "KUEUE (ElasticJobs in a LocalQueue, on Kueue)", []timingRow{
			{fmt.Sprintf("admission (Workload Admitted) → every trainer running, %d workers", *ejWorkers), kq.admitted},
			{fmt.Sprintf("create (kubectl apply) → every trainer running, %d workers", *ejWorkers), kq.create},
			{"preemption (a job of higher priority created) → preempted job's trainers stopped and state saved", kq.preemptSaved},
			{"preemption → preemptor's trainers running", kq.preemptorRunning},
		})
		fmt.Fprintln(&b, "(every run: each preempted rank's file held the step it last saved: 0 steps lost)")
	}
	fmt.Print(b.String())
	if *out != "" {
		check(os.WriteFile(*out, []byte(b.String()), 0o644))
	}
}

// timingRow is a row of a timing table: what is timed, and its times.
type timingRow struct {
	name  string
	times []time.Duration
}

// timingTable writes, after a blank line, a table of timings under title:
// each row's runs, median, min and max.
func timingTable(b *strings.Builder, title string, rows []timingRow) {
	fmt.Fprintln(b)
	tw := tabwriter.NewWriter(b, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, title+"\tRUNS\tMEDIAN\tMIN\tMAX")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%d\t%s\t%s\t%s\n", r.name, len(r.times), stats.Ms(stats.Median(r.times)), stats.Ms(stats.Quantile(r.times, 0)), stats.Ms(stats.Quantile(r.times, 1)))
	}
	tw.Flush()
}

type row struct {
	name     string
	pods, cm []time.Duration
}

// measure scales a StatefulSet between n/2 and n, runs times, and times the
// way up.
func measure(ctx context.Context, c *kubetest.Cluster, binary, dir string, n, runs int) ([]row, error) {
	etcd, err := embedetcd.Start(ctx, embedetcd.Config{DataDir: filepath.Join(dir, "etcd"), LogFile: filepath.Join(dir, "etcd.log")})
	if err != nil {
		return nil, err
	}
	defer etcd.Close()
	cli, err := etcdclient.New(etcdclient.Config{Endpoints: []string{etcd.ClientURL()}})
	if err != nil {
		return nil, err
	}
	defer cli.Close()
	client := jobclient.New(cli, membership.DefaultKeys())

	ns := fmt.Sprintf("bench-%d", n)
	if _, err := c.Client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	serve := exec.Command(binary, "serve", "--etcd-endpoints", etcd.ClientURL(), "--listen-metrics", "127.0.0.1:0",
		"--kubernetes", "--kubeconfig", c.Kubeconfig, "--namespace", ns, "--log-level", logLevel())
	serve.Stdout, serve.Stderr = os.Stderr, os.Stderr
	if err := serve.Start(); err != nil {
		return nil, err
	}
	defer stop(serve)

	runner, err := kubetest.StartPodRunner(c.Client, ns, jobv1.LabelJob, func(pod *corev1.Pod) (kubetest.Container, error) {
		cmd := exec.Command(binary, "sidecar", "--etcd-endpoints", etcd.ClientURL(), "--job", "bench", "--log-level", "warn",
			"--grace-period", "1s", "--", "/bin/sleep", "100000")
		cmd.Env = append(os.Environ(), "POD_NAME="+pod.Name, "POD_NAMESPACE="+ns, "POD_UID="+string(pod.UID), "POD_IP="+pod.Status.PodIP)
		cmd.Stdout, cmd.Stderr = io.Discard, os.Stderr
		if err := cmd.Start(); err != nil {
			return nil, err
		}
		go func() { _ = cmd.Wait() }()
		return process{cmd}, nil
	}, func(err error) { fmt.Fprintln(os.Stderr, err) })
	if err != nil {
		return nil, err
	}
	defer runner.Stop()

	half := n / 2
	if _, err := client.Scale(ctx, "bench", membership.FixedNP(half)); err != nil {
		return nil, err
	}
	labels := map[string]string{jobv1.LabelJob: "bench", jobv1.LabelRole: "worker"}
	replicas := int32(half)
	if _, err := c.Client.AppsV1().StatefulSets(ns).Create(ctx, &appsv1.StatefulSet{
		ObjectMeta: metav1.ObjectMeta{Name: "bench-worker", Labels: labels},
		Spec: appsv1.StatefulSetSpec{
			Replicas: &replicas, Selector: &metav1.LabelSelector{MatchLabels: labels},
			PodManagementPolicy: appsv1.ParallelPodManagement, ServiceName: "bench",
			Template: corev1.PodTemplateSpec{
				ObjectMeta: metav1.ObjectMeta{Labels: labels},
				Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "trainer", Image: "trainer"}}},
			},
		},
	}, metav1.CreateOptions{}); err != nil {
		return nil, err
	}
	if err := waitSize(ctx, c, client, ns, half); err != nil {
		return nil, err
	}
	r := row{name: fmt.Sprintf("%d → %d", half, n)}
	for range runs {
		t0 := time.Now()
		if os.Getenv("BENCH_DEBUG") != "" {
			fmt.Fprintf(os.Stderr, "debug: t0 %s\n", t0.Format("05.000"))
		}
		if _, err := client.Scale(ctx, "bench", membership.FixedNP(n)); err != nil {
			return nil, err
		}
		podsAt, cmAt, err := waitUp(ctx, c, ns, n)
		if err != nil {
			return nil, err
		}
		r.pods, r.cm = append(r.pods, podsAt.Sub(t0)), append(r.cm, cmAt.Sub(t0))
		if err := waitSize(ctx, c, client, ns, n); err != nil {
			return nil, err
		}
		if os.Getenv("BENCH_DEBUG") != "" {
			st, _ := client.Status(ctx, "bench")
			fmt.Fprintf(os.Stderr, "debug: generation %d steps %+v; pods at %s, configmap at %s\n", st.Generation, *st.Steps, podsAt.Sub(t0), cmAt.Sub(t0))
		}
		if _, err := client.Scale(ctx, "bench", membership.FixedNP(half)); err != nil {
			return nil, err
		}
		if err := waitSize(ctx, c, client, ns, half); err != nil {
			return nil, err
		}
	}
	return []row{r}, nil
}

// waitUp returns when every one of n pods was first seen Running, and when
// the ConfigMap first listed n trainers. It polls the API server every 2 ms
// and stamps what it sees when the answer arrives, so it can only overstate
// the times.
func waitUp(ctx context.Context, c *kubetest.Cluster, ns string, n int) (time.Time, time.Time, error) {
	var podsAt, cmAt time.Time
	deadline := time.Now().Add(5 * time.Minute)
	for time.Now().Before(deadline) && (podsAt.IsZero() || cmAt.IsZero()) {
		if podsAt.IsZero() && kubetest.RunningPods(ctx, c.Client, ns, "") == n {
			podsAt = time.Now()
		}
		if cmAt.IsZero() {
			cm, err := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, operatorbridge.ConfigMapName("bench"), metav1.GetOptions{})
			if err == nil && cm.Data[trainerenv.PaddleTrainersNum] == strconv.Itoa(n) {
				cmAt = time.Now()
			}
		}
		time.Sleep(2 * time.Millisecond)
	}
	if podsAt.IsZero() || cmAt.IsZero() {
		return podsAt, cmAt, fmt.Errorf("scale to %d: pods or ConfigMap not there after 5 minutes", n)
	}
	return podsAt, cmAt, nil
}

// waitSize waits for the job to run at size n with n pods, for the pods of
// an earlier size to be gone, and for the ConfigMap to describe size n.
func waitSize(ctx context.Context, c *kubetest.Cluster, client *jobclient.Client, ns string, n int) error {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	err := client.WatchStatus(ctx, "bench", func(s membership.Status) (bool, error) {
		return s.Phase == membership.JobRunning && s.Members == n, nil
	})
	if err != nil {
		return fmt.Errorf("job never ran at %d: %w", n, err)
	}
	for ctx.Err() == nil {
		pods, err := c.Client.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		cm, cmErr := c.Client.CoreV1().ConfigMaps(ns).Get(ctx, operatorbridge.ConfigMapName("bench"), metav1.GetOptions{})
		if err == nil && len(pods.Items) == n && cmErr == nil && cm.Data[trainerenv.PaddleTrainersNum] == strconv.Itoa(n) {
			return nil
		}
		time.Sleep(20 * time.Millisecond)
	}
	return ctx.Err()
}

type process struct{ cmd *exec.Cmd }

func (p process) Stop() { _ = p.cmd.Process.Signal(syscall.SIGTERM) }

func stop(cmd *exec.Cmd) {
	_ = cmd.Process.Signal(syscall.SIGTERM)
	_ = cmd.Wait()
}

func check(err error) {
	if err != nil {
		fatalf("%v", err)
	}
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "kube: "+format+"\n", args...)
	os.Exit(1)
}

func logLevel() string {
	if os.Getenv("BENCH_DEBUG") != "" {
		return "info"
	}
	return "warn"
}
