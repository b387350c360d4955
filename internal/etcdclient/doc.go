// Package etcdclient builds the etcd clients of every component with the
// same connection behaviour: TLS and authentication when configured, and a
// reconnect backoff capped at a second, so that a client is back within
// about a second of etcd, instead of gRPC's default of up to two minutes.
package etcdclient
