package main

import (
	"errors"
	"fmt"
	"io/fs"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/hashicorp/go-hclog"

	"github.com/elastictraining/coordinator/internal/etcdprobe"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/trainerenv"
)

// The checks of the string flags whose values are checked (checkGiven),
// that more than one command has. Each says the flag, the value and what
// the flag wants.

// checkFile checks that path, given to flag, is a file this process can
// read; "" is none.
func checkFile(flag, path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Open(path)
	if err != nil {
		var pathErr *fs.PathError
		if errors.As(err, &pathErr) {
			err = pathErr.Err
		}
		return usagef("%s %q: %v", flag, path, err)
	}
	return f.Close()
}

// splitEndpoints are the endpoints of a comma-separated list.
func splitEndpoints(list string) []string {
	var endpoints []string
	for _, e := range strings.Split(list, ",") {
		if e = strings.TrimSpace(e); e != "" {
			endpoints = append(endpoints, e)
		}
	}
	return endpoints
}

// checkEndpoints checks a list of etcd endpoints, from the flag or
// variable from.
func checkEndpoints(from any, list string) error {
	for _, e := range splitEndpoints(list) {
		if err := etcdprobe.Validate(e); err != nil {
			return usagef("%s: %v", from, err)
		}
	}
	return nil
}

// checkLogLevel checks a level of the coordinator's and the sidecars' logs.
func checkLogLevel(level string) error {
	if hclog.LevelFromString(level) == hclog.NoLevel {
		return usagef("--log-level %q: want trace, debug, info, warn or error", level)
	}
	return nil
}

// checkListenAddress checks the address a server listens on, HOST:PORT
// (":9090" for every interface); "" is none.
func checkListenAddress(flag, addr string) error {
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if n, perr := strconv.Atoi(port); err != nil || perr != nil || n < 0 || n > 65535 || (host != "" && !isHost(host)) {
		return usagef("%s %q: want HOST:PORT such as :9090 or 127.0.0.1:9090", flag, addr)
	}
	return nil
}

// checkHost checks a host others reach this one at: an IP address or a
// host name.
func checkHost(flag, host string) error {
	if host != "" && !isHost(host) {
		return usagef("%s %q: want an IP address or a host name", flag, host)
	}
	return nil
}

// isHost reports whether host is an IP address or a host name: labels of
// letters, digits and '-', separated by dots.
func isHost(host string) bool {
	if net.ParseIP(host) != nil {
		return true
	}
	if len(host) > 253 {
		return false
	}
	for _, label := range strings.Split(strings.TrimSuffix(host, "."), ".") {
		if label == "" || len(label) > 63 || label[0] == '-' || label[len(label)-1] == '-' {
			return false
		}
		for _, r := range label {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-') {
				return false
			}
		}
	}
	return true
}

// checkChoice checks that value, given to flag, is one of choices, which
// want words.
func checkChoice(flag, value, want string, choices ...string) error {
	for _, c := range choices {
		if value == c {
			return nil
		}
	}
	return usagef("%s %q: want %s", flag, value, want)
}

// parseFramework reads --framework's value, from the flag or variable from.
func parseFramework(value string, from origin) (trainerenv.Framework, error) {
	fw, err := trainerenv.ParseFramework(value)
	if err != nil {
		return fw, usageError{fmt.Errorf("%s: %w", from, err)}
	}
	return fw, nil
}

// checkSuccessPolicy checks --success-policy.
func checkSuccessPolicy(value string) error {
	if err := membership.SuccessPolicy(value).Validate(); err != nil {
		return usageError{specFlagError(err, origin{})}
	}
	return nil
}
