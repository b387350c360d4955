// Package proctest helps tests and benchmarks that run real processes: it
// tells whether a process is alive and collects output written from several
// goroutines.
package proctest
