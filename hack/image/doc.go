// Command image builds the coordinator's container image from a static
// binary (see internal/ociimage), writes it as a tarball, and pushes it when
// asked: `make image`, `make push REGISTRY=...`.
//
//	go run ./hack/image -binary bin/image/coordinator -tag elastic-coordinator:v0.8.0 -out bin/elastic-coordinator.tar
package main
