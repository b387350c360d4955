// Package stats summarises the samples of the benchmark harnesses.
package stats
