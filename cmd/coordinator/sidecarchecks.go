package main

import (
	"fmt"
	"path/filepath"

	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/membership"
)

// checkGivenValues has the values given to the sidecar's own string flags
// checked before it runs.
func (o *sidecarOptions) checkGivenValues(fs *pflag.FlagSet) {
	checkGiven(fs, "np", func() error {
		if o.np == "" {
			return nil // no spec
		}
		_, err := parseNP(o.np, o.npOrigin)
		return err
	})
	checkGiven(fs, "role", func() error { _, err := o.parseRole(); return err })
	checkGiven(fs, "node-id", func() error {
		if o.nodeID == "" {
			return nil // the host name
		}
		return checkNodeID(o.nodeID)
	})
	checkGiven(fs, "host", func() error { return checkHost("--host", o.host) })
	checkGiven(fs, "cgroup", func() error { return checkChoice("--cgroup", o.cgroup, "auto or off", "auto", "off") })
	checkGiven(fs, "success-policy", func() error { return checkSuccessPolicy(o.successPolicy) })
	checkGiven(fs, "clean-pod-policy", func() error {
		if err := membership.CleanPodPolicy(o.cleanPodPolicy).Validate(); err != nil {
			return usageError{specFlagError(err, origin{})}
		}
		return nil
	})
	checkGiven(fs, "intranet", func() error { return checkChoice("--intranet", o.intranet, "PodIP or Service", "PodIP", "Service") })
	checkGiven(fs, "log-level", func() error { return checkLogLevel(o.logLevel) })
	checkGiven(fs, "listen-metrics", func() error { return checkListenAddress("--listen-metrics", o.listenMetrics) })
	checkGiven(fs, "preload", func() error { _, err := parsePreload(o.preload, o.preloadOrigin); return err })
	checkGiven(fs, "framework", func() error { _, err := parseFramework(o.framework, o.frameworkFrom); return err })
	checkGiven(fs, "devices", func() error { _, err := nodeDevices(o.devices, o.devicesFrom, o.env, filepath.Glob); return err })
}

// parseRole reads --role.
func (o *sidecarOptions) parseRole() (membership.Role, error) {
	role, err := membership.ParseRole(o.role)
	if err != nil {
		return role, usageError{fmt.Errorf("%s: %w", o.roleOrigin, err)}
	}
	return role, nil
}

// checkNodeID checks a node's id.
func checkNodeID(id string) error {
	if err := membership.ValidateNodeID(id); err != nil {
		return usageError{fmt.Errorf("--node-id: %w", err)}
	}
	return nil
}
