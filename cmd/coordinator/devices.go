package main

import (
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
)

// devicesUsage is the help of --devices, for run and sidecar.
const devicesUsage = "the node's GPUs, which its processes share out (FLAGS_selected_gpus, DEVICE_ID): " +
	"auto (CUDA_VISIBLE_DEVICES, else the /dev/nvidiaN devices), none, a count N, or the visible indices as 0,1,2"

// nvidiaDevice is a GPU's device file; nvidiactl and the others are not.
var nvidiaDevice = regexp.MustCompile(`^nvidia[0-9]+$`)

// nodeDevices reads --devices: the node's GPUs as its processes see them,
// CUDA's visible indices 0..n-1. env and glob are the environment's and
// the file system's.
func nodeDevices(value string, origin origin, env lookupEnv, glob func(string) ([]string, error)) ([]string, error) {
	v := strings.TrimSpace(value)
	switch v {
	case "none", "":
		return nil, nil
	case "auto":
		if visible, ok := env("CUDA_VISIBLE_DEVICES"); ok {
			visible = strings.TrimSpace(visible)
			if visible == "" || visible == "-1" || strings.EqualFold(visible, "NoDevFiles") {
				return nil, nil
			}
			return indices(len(strings.Split(visible, ","))), nil
		}
		files, _ := glob("/dev/nvidia*")
		n := 0
		for _, f := range files {
			if nvidiaDevice.MatchString(filepath.Base(f)) {
				n++
			}
		}
		return indices(n), nil
	}
	if n, err := strconv.Atoi(v); err == nil {
		if n < 0 || n > 1024 {
			return nil, usagef("%s %q: want 0..1024 devices", origin, value)
		}
		return indices(n), nil
	}
	var out []string
	seen := map[string]bool{}
	for _, d := range strings.Split(v, ",") {
		d = strings.TrimSpace(d)
		if n, err := strconv.Atoi(d); err != nil || n < 0 || seen[d] {
			return nil, usagef("%s %q: want auto, none, a count, or distinct device indices as 0,1,2", origin, value)
		}
		seen[d] = true
		out = append(out, d)
	}
	return out, nil
}

// indices are "0".."n-1", nil for none.
func indices(n int) []string {
	if n == 0 {
		return nil
	}
	out := make([]string, n)
	for i := range out {
		out[i] = strconv.Itoa(i)
	}
	return out
}

// runDeviceLabels are the devices run shares out among its nodes, as
// CUDA_VISIBLE_DEVICES names them: run's own visible ones where it has
// CUDA_VISIBLE_DEVICES, else the indices.
func runDeviceLabels(devices []string, env lookupEnv) ([]string, error) {
	visible, ok := env("CUDA_VISIBLE_DEVICES")
	if !ok || strings.TrimSpace(visible) == "" {
		return devices, nil
	}
	labels := strings.Split(visible, ",")
	out := make([]string, 0, len(devices))
	for _, d := range devices {
		i, _ := strconv.Atoi(d)
		if i >= len(labels) {
			return nil, usagef("--devices: device %s, but CUDA_VISIBLE_DEVICES=%s shows %d", d, visible, len(labels))
		}
		out = append(out, strings.TrimSpace(labels[i]))
	}
	return out, nil
}
