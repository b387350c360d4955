package crds

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// TestDeployHoldsTheRenderedCRDs keeps deploy/ what this package
// renders: run `go run ./hack/crds` after a change.
func TestDeployHoldsTheRenderedCRDs(t *testing.T) {
	for _, f := range All() {
		want, err := Render(f)
		require.NoError(t, err)
		have, err := os.ReadFile(filepath.Join("..", "..", "deploy", f.Name))
		require.NoError(t, err)
		require.Equal(t, string(want), string(have), "deploy/%s is stale: run `go run ./hack/crds`", f.Name)
	}
}
