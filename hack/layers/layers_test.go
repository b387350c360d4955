// Package layers checks that the project's packages stand in the layers
// docs/developers.md draws: every import runs down, never up or sideways,
// the test kit is imported by tests and harnesses only, and no package of
// the library reaches into internal/, which is the binary's own. It also
// keeps the top-level folders the user's design card names, with the
// Kubernetes side in one of them.
package layers

import (
	"bytes"
	"encoding/json"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

const module = "github.com/elastictraining/coordinator/"

// layers are the shipped packages, bottom up: a package imports only
// packages of lower layers. A new package takes its place here.
var layers = [][]string{
	// Words: how messages and errors are put.
	{"english"},
	// Leaves: the Kubernetes API types, the process guard, the trainers'
	// Python package.
	{"api/v1", "guard", "python"},
	// The etcd schema.
	{"membership"},
	// What lives on the schema, and what needs nothing of etcd; the
	// sidecars' checkpoint store.
	{"presence", "etcdauth", "trainerenv", "autoscale", "memckpt"},
	// The leader's loop, the client API, the trainers' supervisor.
	{"coordinator", "jobclient", "launcher"},
	// The sidecar; the Kubernetes wing's shared parts.
	{"sidecar", "handover", "operatorbridge/controller", "operatorbridge/crds", "operatorbridge/admission"},
	// The Kubernetes wing.
	{"operatorbridge", "operatorbridge/jobcontroller", "operatorbridge/autoscaler", "operatorbridge/unserved"},
	// The binary's own parts.
	{"internal/embedetcd", "internal/etcdclient", "internal/pki", "internal/ociimage", "internal/timeline",
		"internal/printers", "internal/etcdprobe"},
	{"internal/jobpages"},
	{"internal/localrun"},
	// The commands.
	{"cmd/coordinator/internal/fastpath"},
	{"cmd/coordinator"},
}

// harnesses may import anything, and nothing shipped imports them.
var harnesses = []string{"bench/", "integration/", "hack/", "internal/testkit/"}

// designCard names the top-level folders of the user's design card; each
// holds what the card says it holds.
var designCard = []string{"coordinator", "membership", "launcher", "operatorbridge", "cmd", "testdata", "integration"}

// kubernetesWing is the card's folder for the Kubernetes side: every shipped
// package that talks to an API server lives beneath it, except the binary's
// own wiring (cmd/, internal/).
const kubernetesWing = "operatorbridge"

type pkg struct {
	ImportPath string
	Imports    []string
}

func listPackages(t *testing.T) []pkg {
	t.Helper()
	cmd := exec.Command("go", "list", "-json", module+"...")
	var out, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &stderr
	require.NoError(t, cmd.Run(), stderr.String())
	var pkgs []pkg
	dec := json.NewDecoder(&out)
	for {
		var p pkg
		err := dec.Decode(&p)
		if err == io.EOF {
			break
		}
		require.NoError(t, err)
		p.ImportPath = strings.TrimPrefix(p.ImportPath, module)
		pkgs = append(pkgs, p)
	}
	return pkgs
}

func isHarness(path string) bool {
	return slices.ContainsFunc(harnesses, func(prefix string) bool {
		return strings.HasPrefix(path, prefix) || path == strings.TrimSuffix(prefix, "/")
	})
}

func TestImportsRunDown(t *testing.T) {
	layerOf := map[string]int{}
	for i, layer := range layers {
		for _, p := range layer {
			layerOf[p] = i
		}
	}
	for _, p := range listPackages(t) {
		if isHarness(p.ImportPath) {
			continue
		}
		own, ok := layerOf[p.ImportPath]
		if !assert.True(t, ok, "package %s has no layer: give it one in layers", p.ImportPath) {
			continue
		}
		for _, imp := range p.Imports {
			dep, ours := strings.CutPrefix(imp, module)
			if !ours {
				continue
			}
			assert.False(t, isHarness(dep), "%s imports the harness %s", p.ImportPath, dep)
			if l, ok := layerOf[dep]; ok {
				assert.Less(t, l, own, "%s (layer %d) imports %s (layer %d): imports run down", p.ImportPath, own, dep, l)
			}
			if !strings.HasPrefix(p.ImportPath, "internal/") && !strings.HasPrefix(p.ImportPath, "cmd/") {
				assert.False(t, strings.HasPrefix(dep, "internal/"), "the library package %s imports %s: internal/ is the binary's own", p.ImportPath, dep)
			}
		}
	}
}

// TestTheLayersNameRealPackages keeps the table true as packages move.
func TestTheLayersNameRealPackages(t *testing.T) {
	have := map[string]bool{}
	for _, p := range listPackages(t) {
		have[p.ImportPath] = true
	}
	for _, layer := range layers {
		for _, p := range layer {
			assert.True(t, have[p], "layers names %s, which is not a package", p)
		}
	}
}

// TestTheDesignCardsFoldersStand keeps the layout the design card names at
// the top of the repository, and no second home for the Kubernetes side.
func TestTheDesignCardsFoldersStand(t *testing.T) {
	root := repoRoot(t)
	for _, dir := range designCard {
		info, err := os.Stat(filepath.Join(root, dir))
		if assert.NoError(t, err, "the design card names the folder %s/", dir) {
			assert.True(t, info.IsDir(), "%s is not a folder", dir)
		}
	}
	_, err := os.Stat(filepath.Join(root, "kube"))
	assert.True(t, os.IsNotExist(err), "kube/ is back: the Kubernetes side lives in %s/", kubernetesWing)
}

// TestKubernetesLivesInTheWing finds every shipped package that imports a
// Kubernetes client and requires it beneath operatorbridge/.
func TestKubernetesLivesInTheWing(t *testing.T) {
	wing := 0
	for _, p := range listPackages(t) {
		if isHarness(p.ImportPath) || strings.HasPrefix(p.ImportPath, "cmd/") || strings.HasPrefix(p.ImportPath, "internal/") {
			continue
		}
		inWing := p.ImportPath == kubernetesWing || strings.HasPrefix(p.ImportPath, kubernetesWing+"/")
		if inWing {
			wing++
		}
		for _, imp := range p.Imports {
			if strings.HasPrefix(imp, "k8s.io/client-go/") {
				assert.True(t, inWing, "%s imports %s: the Kubernetes side lives in %s/", p.ImportPath, imp, kubernetesWing)
				break
			}
		}
	}
	assert.GreaterOrEqual(t, wing, 6, "%s/ holds the bridge, the job controller, the autoscaler, the CRDs, the controller helper and the unserved reporter", kubernetesWing)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	out, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}").Output()
	require.NoError(t, err)
	return strings.TrimSpace(string(out))
}
