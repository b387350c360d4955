// Package sidecar is the node side of the protocol: it registers a node,
// follows the job's plan, and stops and starts the node's workload as each
// generation asks, acking every step in the node record.
package sidecar
