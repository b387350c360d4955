package main

import (
	"context"
	"errors"
	"net"
	"net/http"
	"time"

	"github.com/hashicorp/go-hclog"

	"github.com/elastictraining/coordinator/sidecar"
)

// serveSidecarMetrics serves a sidecar's metrics on /metrics at addr until
// the returned function is called.
func serveSidecarMetrics(addr, job, node string, logger hclog.Logger) (func(), *sidecar.Metrics, error) {
	m := sidecar.NewMetrics(job, node)
	listener, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, nil, usagef("--listen-metrics %s: %v", addr, err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", m)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if err := srv.Serve(listener); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Warn("metrics server stopped", "error", err)
		}
	}()
	logger.Info("serving metrics", "address", "http://"+listener.Addr().String()+"/metrics")
	return func() {
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		_ = srv.Shutdown(ctx)
		<-done
	}, m, nil
}
