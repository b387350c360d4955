package trainerenv

import (
	"go/ast"
	"go/parser"
	"go/token"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestTableHasEveryNameOnce checks names.go against the table: every name
// is in the table once, and the table names nothing else.
func TestTableHasEveryNameOnce(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "names.go", nil, 0)
	require.NoError(t, err)
	declared := map[string]bool{}
	ast.Inspect(f, func(n ast.Node) bool {
		if lit, ok := n.(*ast.BasicLit); ok && lit.Kind == token.STRING {
			name, err := strconv.Unquote(lit.Value)
			require.NoError(t, err)
			declared[name] = true
		}
		return true
	})
	seen := map[string]bool{}
	for _, v := range table {
		assert.False(t, seen[v.name], "%s is in the table twice", v.name)
		seen[v.name] = true
		assert.True(t, declared[v.name], "%s is not declared in names.go", v.name)
		assert.NotZero(t, v.in, "%s is given to no one", v.name)
	}
	for name := range declared {
		assert.True(t, seen[name], "%s is declared but not in the table", name)
	}
}
