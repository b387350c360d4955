package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestNodeDevices(t *testing.T) {
	env := func(vars map[string]string) lookupEnv {
		return func(name string) (string, bool) { v, ok := vars[name]; return v, ok }
	}
	glob := func(files ...string) func(string) ([]string, error) {
		return func(string) ([]string, error) { return files, nil }
	}
	noGPUs := glob("/dev/nvidiactl", "/dev/nvidia-uvm")
	for _, tc := range []struct {
		value string
		env   map[string]string
		glob  func(string) ([]string, error)
		want  []string
	}{
		{value: "auto", glob: noGPUs},
		{value: "auto", glob: glob("/dev/nvidiactl", "/dev/nvidia3", "/dev/nvidia7", "/dev/nvidia-uvm"), want: []string{"0", "1"}},
		{value: "auto", env: map[string]string{"CUDA_VISIBLE_DEVICES": "4,6"}, glob: noGPUs, want: []string{"0", "1"}},
		{value: "auto", env: map[string]string{"CUDA_VISIBLE_DEVICES": ""}, glob: glob("/dev/nvidia0")},
		{value: "auto", env: map[string]string{"CUDA_VISIBLE_DEVICES": "-1"}, glob: glob("/dev/nvidia0")},
		{value: "none", glob: glob("/dev/nvidia0")},
		{value: "3", glob: noGPUs, want: []string{"0", "1", "2"}},
		{value: "1,3", glob: noGPUs, want: []string{"1", "3"}},
	} {
		got, err := nodeDevices(tc.value, origin{flag: "devices"}, env(tc.env), tc.glob)
		require.NoError(t, err, tc.value)
		assert.Equal(t, tc.want, got, "%s %v", tc.value, tc.env)
	}
	labels, err := runDeviceLabels([]string{"0", "2"}, env(map[string]string{"CUDA_VISIBLE_DEVICES": "4,5,6"}))
	require.NoError(t, err)
	assert.Equal(t, []string{"4", "6"}, labels, "run names the devices its nodes see as CUDA does")
	_, err = runDeviceLabels([]string{"3"}, env(map[string]string{"CUDA_VISIBLE_DEVICES": "4,5,6"}))
	assert.EqualError(t, err, "--devices: device 3, but CUDA_VISIBLE_DEVICES=4,5,6 shows 3")
}
