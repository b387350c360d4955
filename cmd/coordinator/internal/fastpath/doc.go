// Package fastpath runs the commands that must start in milliseconds, the
// process guard, its fence watchdogs and `commit`, from package
// initialisation: before the rest
// of the binary (client-go, gRPC, etcd, Prometheus) initialises, which
// takes most of a second of CPU. Go initialises a package as soon as the
// packages it imports are, in import-path order; this one imports only the
// guard and the standard library, so its init runs among the first. A test
// checks that no heavy package initialises before it.
package fastpath
