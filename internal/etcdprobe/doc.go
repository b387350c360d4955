// Package etcdprobe finds out quickly what answers at an etcd endpoint
// before a client is built: nothing (refused, no such host, silence), a
// server that speaks TLS where plain HTTP was asked or the other way
// round, a certificate this side does not trust, an HTTP server that is
// not etcd. Each is one specific line at once rather than a client's
// timeout. It also checks that an endpoint is written as HOST:PORT or a
// URL with a port.
//
// It uses the standard library only, so that the sidecar's own binary,
// which probes its etcd too, stays light.
package etcdprobe
