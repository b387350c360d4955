package integration

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// walkthroughStep is one command of docs/kubernetes.md's walkthrough and
// what it must show: ok is asked of its output, again and again for a
// command that only looks (it shows what is there once the job gets
// there), once for one that changes something.
type walkthroughStep struct {
	command string
	looks   bool
	ok      func(stdout, stderr string) bool
}

// TestTheKubernetesWalkthrough runs docs/kubernetes.md's walkthrough, its
// commands as written, in its order, as a user at a terminal: the samples
// applied with kubectl (a PaddleJob with servers, an MSJob, an ElasticJob),
// each pod's injected command run; `get -o wide` with every role's count,
// the generation and the restarts; a pod deleted; a scale; a patch of
// replicas; describe; the jobs deleted and every pod gone.
func TestTheKubernetesWalkthrough(t *testing.T) {
	t.Parallel()
	mirror := demoRegistry(t)
	e := newKubeEnv(t, kubeOptions{injected: true, toyEnv: []string{"TOY_STEPS=100000", "TOY_INTERVAL=0.05"},
		bridgeArgs: []string{"--registry-mirror", "registry.baidubce.com=" + mirror}})
	applyCRDs(t, e.c, e.dyn)

	// row finds the line of a resource in kubectl's table and its fields.
	row := func(out, name string) []string {
		for _, line := range strings.Split(out, "\n") {
			if f := strings.Fields(line); len(f) > 0 && strings.HasSuffix(f[0], "/"+name) || len(f) > 0 && f[0] == name {
				return f
			}
		}
		return nil
	}
	atLeast := func(field string, n int) bool {
		v, err := strconv.Atoi(field)
		return err == nil && v >= n
	}
	var generation int
	steps := []walkthroughStep{
		{command: "kubectl apply -f deploy/samples/wide-and-deep-paddlejob.yaml -f deploy/samples/widedeep-msjob.yaml -f deploy/samples/resnet-elasticjob.yaml",
			ok: func(out, _ string) bool {
				return strings.Contains(out, "paddlejob.batch.paddlepaddle.org/wide-and-deep created") &&
					strings.Contains(out, "msjob.mindspore.gitee.com/ms-widedeep-dataparallel created") &&
					strings.Contains(out, "elasticjob.elastictraining.io/resnet created")
			}},
		{command: "kubectl get paddlejob,msjob,elasticjob -n elastic-system -o wide", looks: true, ok: func(out, _ string) bool {
			// PaddleJob: STATUS MODE WORKER AGE PS GENERATION RESTARTS ...
			pj := row(out, "wide-and-deep")
			// MSJob: STATE AGE WORKERS GENERATION RESTARTS ...
			ms := row(out, "ms-widedeep-dataparallel")
			// ElasticJob: PHASE NP READY WORLD GENERATION RESTARTS AGE ...
			ej := row(out, "resnet")
			if len(pj) < 8 || len(ms) < 6 || len(ej) < 7 {
				return false
			}
			if pj[1] != "Running" || pj[2] != "PS" || pj[3] != "2/2" || pj[5] != "2/2" || ms[1] != "Running" || ms[3] != "4" ||
				ej[1] != "Running" || ej[2] != "2:4" || ej[3] != "4" {
				return false
			}
			generation, _ = strconv.Atoi(pj[6])
			return strings.Contains(out, "MESSAGE") && strings.Contains(out, "PROBLEM") && strings.Contains(out, "RESTARTS")
		}},
		{command: "kubectl delete pod wide-and-deep-worker-1 -n elastic-system", ok: func(out, _ string) bool {
			return strings.Contains(out, `pod "wide-and-deep-worker-1" deleted`)
		}},
		{command: "kubectl get paddlejob wide-and-deep -n elastic-system -o wide", looks: true, ok: func(out, _ string) bool {
			pj := row(out, "wide-and-deep")
			return len(pj) >= 8 && pj[1] == "Running" && pj[3] == "2/2" && pj[5] == "2/2" &&
				atLeast(pj[6], generation+1) && atLeast(pj[7], 1) // the pod's loss is a restart
		}},
		{command: "kubectl scale paddlejob/wide-and-deep --replicas=3 -n elastic-system", ok: func(out, _ string) bool {
			return strings.Contains(out, "paddlejob.batch.paddlepaddle.org/wide-and-deep scaled")
		}},
		{command: `kubectl patch msjob ms-widedeep-dataparallel -n elastic-system --type=merge -p '{"spec":{"msReplicaSpecs":{"Worker":{"replicas":2}}}}'`,
			ok: func(out, _ string) bool {
				return strings.Contains(out, "msjob.mindspore.gitee.com/ms-widedeep-dataparallel patched")
			}},
		{command: "kubectl get paddlejob,msjob -n elastic-system -o wide", looks: true, ok: func(out, _ string) bool {
			pj, ms := row(out, "wide-and-deep"), row(out, "ms-widedeep-dataparallel")
			// The scale subresources an HPA reads say the same: workers.
			return len(pj) >= 8 && len(ms) >= 6 && pj[1] == "Running" && pj[3] == "3/3" && ms[1] == "Running" && ms[3] == "2" &&
				e.scaleStatus(paddleJobs, "wide-and-deep") == 3 && e.scaleStatus(msJobs, "ms-widedeep-dataparallel") == 2
		}},
		{command: "kubectl describe msjob ms-widedeep-dataparallel -n elastic-system", looks: true, ok: func(out, _ string) bool {
			return strings.Contains(out, "MSJobCreated") && strings.Contains(out, "MSJobRunning") && strings.Contains(out, "generation ")
		}},
		{command: "kubectl delete paddlejob wide-and-deep -n elastic-system", ok: func(out, _ string) bool {
			return strings.Contains(out, `paddlejob.batch.paddlepaddle.org "wide-and-deep" deleted`)
		}},
		{command: "kubectl delete msjob ms-widedeep-dataparallel -n elastic-system", ok: func(out, _ string) bool {
			return strings.Contains(out, `msjob.mindspore.gitee.com "ms-widedeep-dataparallel" deleted`)
		}},
		{command: "kubectl delete elasticjob resnet -n elastic-system", ok: func(out, _ string) bool {
			return strings.Contains(out, `elasticjob.elastictraining.io "resnet" deleted`)
		}},
		{command: "kubectl get pods -n elastic-system -l elastic.job", looks: true, ok: func(out, errOut string) bool {
			return strings.TrimSpace(out) == "" && strings.Contains(errOut, "No resources found")
		}},
	}

	var want []string
	for _, s := range steps {
		want = append(want, s.command)
	}
	require.Equal(t, want, walkthroughCommands(t), "docs/kubernetes.md's walkthrough and this test say different commands")

	samples := t.TempDir()
	for _, s := range steps {
		args := shellWords(t, s.command)[1:]
		for i, a := range args {
			switch {
			case a == "elastic-system":
				args[i] = e.ns
			case strings.HasPrefix(a, "deploy/samples/"):
				// The samples name the namespace: this test's, here.
				copied := filepath.Join(samples, filepath.Base(a))
				require.NoError(t, os.WriteFile(copied, []byte(strings.ReplaceAll(mustRead(t, filepath.Join(repoRoot, a)), "namespace: elastic-system", "namespace: "+e.ns)), 0o644))
				args[i] = copied
			}
		}
		var out, errOut string
		run := func() bool {
			var err error
			out, errOut, err = e.c.Kubectl(t.Context(), repoRoot, "", args...)
			return err == nil && s.ok(out, errOut)
		}
		if s.looks {
			require.Eventually(t, run, 120*time.Second, 250*time.Millisecond, "%s never showed what the walkthrough says; last:\n%s%s\ncoordinator:\n%s",
				s.command, out, errOut, e.bridge.out)
		} else {
			require.True(t, run(), "%s:\n%s%s", s.command, out, errOut)
		}
		t.Logf("%s\n%s", s.command, out)
	}

	assert.Equal(t, int64(-1), e.scaleStatus(paddleJobs, "wide-and-deep"), "the job is gone")
}

// walkthroughCommands are the command lines of docs/kubernetes.md's
// walkthrough, between its <!-- walkthrough --> markers.
func walkthroughCommands(t *testing.T) []string {
	t.Helper()
	doc := mustRead(t, filepath.Join(repoRoot, "docs", "kubernetes.md"))
	start, end := strings.Index(doc, "<!-- walkthrough -->"), strings.Index(doc, "<!-- /walkthrough -->")
	require.True(t, start >= 0 && end > start, "docs/kubernetes.md has no walkthrough")
	var cmds []string
	for _, line := range strings.Split(doc[start:end], "\n") {
		if strings.HasPrefix(line, "kubectl ") {
			cmds = append(cmds, line)
		}
	}
	return cmds
}

// shellWords splits a command line as sh does for the walkthrough's
// commands: words apart by spaces, single quotes kept together.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	quoted, inWord := false, false
	for _, r := range line {
		switch {
		case r == '\'':
			quoted, inWord = !quoted, true
		case r == ' ' && !quoted:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	require.False(t, quoted, "unbalanced quote in %q", line)
	if inWord {
		words = append(words, word.String())
	}
	return words
}
