package v1_test

import (
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
)

// docs/kubernetes.md's list of an ElasticJob's fields, from "Roles:" to
// the paragraph on what the API server refuses, names every field of the
// spec and of its roles, in backquotes: a field added here is documented
// there.
func TestTheKubernetesDocListsEveryField(t *testing.T) {
	doc, err := os.ReadFile("../../docs/kubernetes.md")
	require.NoError(t, err)
	_, section, found := strings.Cut(string(doc), "\nRoles: `worker`")
	require.True(t, found, "no list of the job fields")
	section, _, found = strings.Cut(section, "\nThe API server refuses")
	require.True(t, found, "no end to the list of the job fields")
	for _, typ := range []reflect.Type{reflect.TypeFor[jobv1.ElasticJobSpec](), reflect.TypeFor[jobv1.RoleSpec]()} {
		for i := range typ.NumField() {
			name, _, _ := strings.Cut(typ.Field(i).Tag.Get("json"), ",")
			assert.Contains(t, section, "`"+name+"`", "%s.%s is not in docs/kubernetes.md's list of job fields", typ.Name(), typ.Field(i).Name)
		}
	}
}
