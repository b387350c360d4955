package main

import (
	"cmp"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// Modes of a pass.
const (
	modeOff = "off" // no autoscaling: fixed jobs
	modeEDL = "edl" // EDL's rule, run by the bench: one trainer a job a pass
	modeOn  = "on"  // coordinator serve --autoscale
)

// pass is one run of a case in a mode, in a namespace of its own.
type pass struct {
	env   *env
	cas   int
	mode  string
	ns    string
	start time.Time

	mu      sync.Mutex
	jobs    []*jobTimes
	samples []sample
	marks   []mark
}

// jobTimes are a job's times since the pass started.
type jobTimes struct {
	name      string
	submitted time.Duration
	// seen is when a pod of it was first listed, running when one was
	// first Running (the seed's start), trained when its first generation
	// ran with at least its minimum of trainers (the stricter start).
	seen, running, trained time.Duration
	generation             int64
}

// sample is the cluster at one moment of the pass.
type sample struct {
	at           time.Duration
	utilization  float64 // CPU requests of Running pods / allocatable
	pendingJobs  int     // submitted, no pod Running
	nginx        int     // nginx pods Running
	trainers     int     // trainer pods Running
	nginxPending int
	// stranded is the free CPU of the nodes where no trainer fits (less
	// than 5 CPU free), over the allocatable: room only a smaller pod
	// could use.
	stranded float64
}

// mark is a step of the schedule: nginx set to n replicas.
type mark struct {
	at    time.Duration
	what  string
	value int
}

func (p *pass) mark(what string, value int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.marks = append(p.marks, mark{time.Since(p.start), what, value})
}

// run runs the pass: serve (with --autoscale when on), the simulated pods,
// the sampler, EDL's rule when edl, the case's schedule; then tears it all
// down and waits until the namespace is gone.
func (p *pass) run(ctx context.Context) error {
	kube := p.env.kube
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.ns}}, metav1.CreateOptions{}); err != nil {
		return err
	}
	level := "warn"
	if p.env.logs != "" {
		level = "info"
	}
	args := []string{"serve", "--etcd-endpoints", p.env.etcdURL, "--listen-metrics", "127.0.0.1:0", "--kubernetes",
		"--kubeconfig", p.env.cluster.Kubeconfig, "--namespace", p.ns, "--sidecar-image", "bench", "--log-level", level}
	if p.mode == modeOn {
		args = append(args, "--autoscale", "--autoscale-deletion-cost", "--autoscale-cooldown", (60 * time.Second / time.Duration(p.env.compress)).String(),
			"--autoscale-period", (30 * time.Second / time.Duration(p.env.compress)).String())
	}
	serve := exec.Command(p.env.binary, args...)
	serve.Stdout, serve.Stderr = os.Stderr, os.Stderr
	if p.env.logs != "" {
		log, err := os.Create(filepath.Join(p.env.logs, p.ns+".log"))
		if err != nil {
			return err
		}
		defer log.Close()
		serve.Stdout, serve.Stderr = log, log
	}
	if err := serve.Start(); err != nil {
		return err
	}
	defer func() {
		_ = serve.Process.Signal(os.Interrupt)
		_ = serve.Wait()
	}()
	runner, err := simulatedPods(kube, p.env.etcd, p.ns)
	if err != nil {
		return err
	}
	defer runner.Stop()

	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	defer wg.Wait()
	defer cancel()
	p.start = time.Now()
	wg.Add(1)
	go func() {
		defer wg.Done()
		p.sampleEvery(ctx, 500*time.Millisecond)
	}()
	if p.mode == modeEDL {
		wg.Add(1)
		go func() {
			defer wg.Done()
			p.edlRule(ctx, 5*time.Second/time.Duration(p.env.compress))
		}()
	}
	var runErr error
	if p.cas == 1 {
		runErr = p.case1(ctx)
	} else {
		runErr = p.case2(ctx)
	}
	p.readGenerations(ctx)
	cancel()
	wg.Wait()
	if err := p.teardown(context.WithoutCancel(ctx)); err != nil && runErr == nil {
		runErr = err
	}
	return runErr
}

// sampleEvery lists the namespace's pods and the jobs' status each period.
func (p *pass) sampleEvery(ctx context.Context, period time.Duration) {
	client := jobclient.New(p.env.etcd, membership.DefaultKeys())
	p.listEvery(ctx, period, func(pods *corev1.PodList) {
		now := time.Since(p.start)
		s := sample{at: now}
		var running int64
		seen, run := map[string]bool{}, map[string]bool{}
		free := nodeCPU()
		for _, pod := range pods.Items {
			if pod.Spec.NodeName != "" && pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
				for _, c := range pod.Spec.Containers {
					free[pod.Spec.NodeName] -= c.Resources.Requests.Cpu().MilliValue()
				}
			}
		}
		var stranded int64
		for _, f := range free {
			if f > 0 && f < 5000 {
				stranded += f
			}
		}
		s.stranded = float64(stranded) / (allocatableCPU * 1000)
		for _, pod := range pods.Items {
			job := pod.Labels["elastic.job"]
			isRunning := pod.Status.Phase == corev1.PodRunning && pod.DeletionTimestamp == nil
			if job != "" {
				seen[job] = true
				run[job] = run[job] || isRunning
			}
			if isRunning {
				for _, c := range pod.Spec.Containers {
					running += c.Resources.Requests.Cpu().MilliValue()
				}
			}
			switch {
			case pod.Labels["app"] == "nginx" && isRunning:
				s.nginx++
			case pod.Labels["app"] == "nginx" && pod.Status.Phase == corev1.PodPending:
				s.nginxPending++
			case pod.Labels["elastic.role"] == "worker" && isRunning:
				s.trainers++
			}
		}
		s.utilization = float64(running) / (allocatableCPU * 1000)
		p.mu.Lock()
		for _, j := range p.jobs {
			if j.seen == 0 && seen[j.name] {
				j.seen = now
			}
			if j.running == 0 && run[j.name] {
				j.running = now
			}
			if !run[j.name] {
				s.pendingJobs++
			}
		}
		untrained := slices.DeleteFunc(slices.Clone(p.jobs), func(j *jobTimes) bool { return j.trained != 0 || j.seen == 0 })
		p.samples = append(p.samples, s)
		p.mu.Unlock()
		for _, j := range untrained {
			st, err := client.Status(ctx, j.name)
			if err == nil && st.Phase == membership.JobRunning && st.WorldSize >= minTrainers {
				p.mu.Lock()
				j.trained = time.Since(p.start)
				p.mu.Unlock()
			}
		}
	})
}

// listEvery lists the namespace's pods each period and hands them to fn,
// until ctx ends.
func (p *pass) listEvery(ctx context.Context, period time.Duration, fn func(*corev1.PodList)) {
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(period):
		}
		if pods, err := p.env.kube.CoreV1().Pods(p.ns).List(ctx, metav1.ListOptions{}); err == nil {
			fn(pods)
		}
	}
}

// readGenerations notes every job's generation: each after the first was
// a restart of the whole job.
func (p *pass) readGenerations(ctx context.Context) {
	client := jobclient.New(p.env.etcd, membership.DefaultKeys())
	for _, j := range p.jobs {
		if st, err := client.Status(ctx, j.name); err == nil {
			j.generation = st.Generation
		}
	}
}

// edlRule is PaddlePaddle EDL's autoscaler as documented: every period,
// with requests of every pod summed against the cluster's CPU, each job
// shrinks by one trainer, the most fulfilled first, while requests exceed
// 0.97 of it, or grows by one, the least fulfilled first, while they stay
// under it.
func (p *pass) edlRule(ctx context.Context, period time.Duration) {
	limit := int64(0.97 * allocatableCPU * 1000)
	replicas := map[string]int{}
	p.listEvery(ctx, period, func(pods *corev1.PodList) {
		var requests int64
		for _, pod := range pods.Items {
			if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
				continue
			}
			for _, c := range pod.Spec.Containers {
				requests += c.Resources.Requests.Cpu().MilliValue()
			}
		}
		p.mu.Lock()
		var names []string
		for _, j := range p.jobs {
			names = append(names, j.name)
			if _, ok := replicas[j.name]; !ok {
				replicas[j.name] = minTrainers
			}
		}
		p.mu.Unlock()
		fulfillment := func(name string) float64 {
			return float64(replicas[name]-minTrainers) / float64(maxTrainers-minTrainers)
		}
		shrink := requests > limit
		slices.SortStableFunc(names, func(a, b string) int {
			if shrink {
				return cmp.Compare(fulfillment(b), fulfillment(a))
			}
			return cmp.Compare(fulfillment(a), fulfillment(b))
		})
		for _, name := range names {
			n := replicas[name]
			switch {
			case shrink && requests > limit && n > minTrainers:
				n--
				requests -= 5000
			case !shrink && n < maxTrainers && requests+5000 <= limit:
				n++
				requests += 5000
			default:
				continue
			}
			if err := p.scaleJob(ctx, name, n); err == nil {
				replicas[name] = n
			}
		}
	})
}

// teardown deletes the namespace and waits until it is gone, its pods and
// everything else: the controllers cleaning up a pass must not slow the
// next one down (a pass started while they did saw its nginx pods 14 s
// late).
func (p *pass) teardown(ctx context.Context) error {
	kube := p.env.kube
	if err := kube.CoreV1().Namespaces().Delete(ctx, p.ns, metav1.DeleteOptions{}); err != nil {
		return err
	}
	deadline := time.Now().Add(10 * time.Minute)
	for time.Now().Before(deadline) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, p.ns, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		time.Sleep(time.Second)
	}
	return fmt.Errorf("namespace %s still there after 10 minutes", p.ns)
}

func (p *pass) String() string { return fmt.Sprintf("case %d, %s", p.cas, strings.ToUpper(p.mode)) }
