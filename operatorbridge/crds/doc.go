// Package crds defines the CustomResourceDefinitions the project ships in
// deploy/ (the ElasticJob's in deploy/base/, the optional PaddleJob and
// MSJob in deploy/crds/): their schemas are written once here, where the four roles
// of a job share one, and rendered to YAML by `go run ./hack/crds`. A test
// keeps deploy/ equal to what this package renders.
package crds
