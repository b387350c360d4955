package guard_test

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/elastictraining/coordinator/guard"
)

// fuzzDecoder checks that a decoder never panics, fails only with
// ErrInvalidMessage, and reads back what it accepted: the same message, as
// its encoding says (an empty list and none are the same on the wire).
func fuzzDecoder[T any](f *testing.F, decode func([]byte) (T, error), seeds ...string) {
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		v, err := decode(data)
		if err != nil {
			require.ErrorIs(t, err, guard.ErrInvalidMessage)
			return
		}
		b, err := json.Marshal(v)
		require.NoError(t, err)
		again, err := decode(b)
		require.NoError(t, err, "re-decoding %s", b)
		b2, err := json.Marshal(again)
		require.NoError(t, err)
		require.JSONEq(t, string(b), string(b2))
	})
}

func FuzzDecodeCommand(f *testing.F) {
	fuzzDecoder(f, guard.DecodeCommand,
		`{"seq":1,"op":"deadline","lease":7,"killAt":123456789}`,
		`{"seq":2,"op":"start","lease":7,"generation":3,"procs":[{"rank":0,"path":"/bin/true","argv":["true"],"env":["A=B"],"prefix":"[rank 0] "}]}`,
		`{"seq":3,"op":"stop","graceNanos":1000000000}`, `{"seq":4,"op":"kill"}`,
		`{"seq":5,"op":"warm","warm":[{"slot":0,"path":"/usr/bin/python3","argv":["python3","-u","train.py"],"env":["A=B"],"prefix":"[warm 0] ","preload":["torch","numpy.linalg"]}]}`,
		`{"seq":6,"op":"start","lease":7,"generation":4,"procs":[{"rank":0,"argv":["true"],"env":[],"prefix":""}],"watch":{"timeoutNanos":-1,"startupNanos":-1,"atLeastNanos":30000000000,"expect":true}}`,
		`{"seq":7,"op":"start","lease":7,"generation":5,"procs":[{"rank":0,"argv":["true"],"env":[],"prefix":""}],"watch":{"timeoutNanos":300000000,"startupNanos":0}}`,
		`{"seq":8,"op":"stop","stacks":true}`, `{"seq":9,"op":"stop","graceNanos":5000000000,"stacks":true}`,
		`{"seq":10,"op":"kill","stacks":true}`, `{"seq":11,"op":"stop","watch":{"timeoutNanos":1,"startupNanos":1}}`)
}

func FuzzDecodeReport(f *testing.F) {
	fuzzDecoder(f, guard.DecodeReport,
		`{"event":"ready","seq":0,"pid":12,"cgroup":"/sys/fs/cgroup/x"}`, `{"event":"started","seq":2,"pids":[13,14]}`,
		`{"event":"exit","seq":2,"pid":13,"rank":1,"code":137,"signal":9}`, `{"event":"fenced","seq":5,"lease":7}`,
		`{"event":"warm","seq":5,"rank":1,"pid":15}`, `{"event":"started","seq":6,"pids":[15],"warm":1}`,
		`{"event":"hung","seq":6,"pid":15,"rank":3,"generation":4,"step":120,"quietNanos":5100000000,"timeoutNanos":5000000000,"lastActivityUnixNanos":1700000000000000000}`,
		`{"event":"hung","seq":6,"pid":15,"generation":4,"quietNanos":1100000000,"timeoutNanos":1000000000,"stopped":true}`,
		`{"event":"hung","seq":6,"pid":15,"generation":4,"timeoutNanos":0}`,
		`{"event":"progress","seq":6,"generation":4,"timeoutNanos":5000000000,"progress":[{"rank":2,"steps":10,"step":110,"intervalNanos":20000000,"maxIntervalNanos":31000000}]}`,
		`{"event":"progress","seq":6,"generation":4,"progress":[]}`)
}

// The watch and the stacks belong to their commands, and the reports of a
// hang and of progress say whose and for which generation.
func TestHangProtocolIsValidated(t *testing.T) {
	for _, tc := range []struct {
		name, line string
		ok         bool
	}{
		{"a learned watch", `{"seq":1,"op":"start","lease":7,"generation":1,"procs":[{"rank":0,"argv":["true"],"env":[],"prefix":""}],"watch":{"timeoutNanos":-1,"startupNanos":-1}}`, true},
		{"a timeout below -1", `{"seq":1,"op":"start","lease":7,"generation":1,"procs":[{"rank":0,"argv":["true"],"env":[],"prefix":""}],"watch":{"timeoutNanos":-2,"startupNanos":0}}`, false},
		{"a negative lower bound", `{"seq":1,"op":"start","lease":7,"generation":1,"procs":[{"rank":0,"argv":["true"],"env":[],"prefix":""}],"watch":{"timeoutNanos":-1,"startupNanos":0,"atLeastNanos":-1}}`, false},
		{"a watch with a stop", `{"seq":1,"op":"stop","watch":{"timeoutNanos":1,"startupNanos":1}}`, false},
		{"stacks with a stop", `{"seq":1,"op":"stop","stacks":true}`, true},
		{"stacks with a kill", `{"seq":1,"op":"kill","stacks":true}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := guard.DecodeCommand([]byte(tc.line))
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, guard.ErrInvalidMessage)
			}
		})
	}
	for _, tc := range []struct {
		name, line string
		ok         bool
	}{
		{"a hang", `{"event":"hung","seq":2,"pid":15,"generation":4,"quietNanos":5,"timeoutNanos":4}`, true},
		{"a hang of nobody", `{"event":"hung","seq":2,"generation":4,"quietNanos":5,"timeoutNanos":4}`, false},
		{"a hang without a generation", `{"event":"hung","seq":2,"pid":15,"quietNanos":5,"timeoutNanos":4}`, false},
		{"a hang without a timeout", `{"event":"hung","seq":2,"pid":15,"generation":4,"quietNanos":5}`, false},
		{"progress", `{"event":"progress","seq":2,"generation":4,"progress":[{"rank":0,"steps":1,"step":1,"intervalNanos":0,"maxIntervalNanos":0}]}`, true},
		{"progress of no rank", `{"event":"progress","seq":2,"generation":4}`, false},
		{"progress backwards", `{"event":"progress","seq":2,"generation":4,"progress":[{"rank":0,"steps":-1,"step":0,"intervalNanos":0,"maxIntervalNanos":0}]}`, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := guard.DecodeReport([]byte(tc.line))
			if tc.ok {
				require.NoError(t, err)
			} else {
				require.ErrorIs(t, err, guard.ErrInvalidMessage)
			}
		})
	}
}

func FuzzDecodeCommitRequest(f *testing.F) {
	fuzzDecoder(f, guard.DecodeCommitRequest,
		`{"op":"rename","generation":3,"src":"/ckpt/a.tmp","dst":"/ckpt/a"}`, `{"op":"check","generation":1}`)
}

func TestParsePython(t *testing.T) {
	for _, tc := range []struct {
		name string
		argv []string
		want guard.PythonCommand
		err  bool
	}{
		{"script", []string{"python3", "train.py", "--lr", "1"}, guard.PythonCommand{Script: "train.py", Args: []string{"--lr", "1"}}, false},
		{"options", []string{"/usr/bin/python3.11", "-u", "-X", "dev", "-Wignore", "-OO", "t.py"},
			guard.PythonCommand{Options: []string{"-u", "-X", "dev", "-W", "ignore", "-OO"}, Script: "t.py", Args: []string{}}, false},
		{"module", []string{"python", "-um", "torch.distributed.run", "x"}, guard.PythonCommand{Options: []string{"-u"}, Module: "torch.distributed.run", Args: []string{"x"}}, false},
		{"code", []string{"python3", "-c", "print(1)", "a"}, guard.PythonCommand{Code: "print(1)", Args: []string{"a"}}, false},
		{"not python", []string{"bash", "run.sh"}, guard.PythonCommand{}, true},
		{"pythonw is not python", []string{"python3-config"}, guard.PythonCommand{}, true},
		{"stdin", []string{"python3", "-"}, guard.PythonCommand{}, true},
		{"interactive", []string{"python3", "-i", "t.py"}, guard.PythonCommand{}, true},
		{"version", []string{"python3", "--version"}, guard.PythonCommand{}, true},
		{"no script", []string{"python3", "-u"}, guard.PythonCommand{}, true},
		{"missing -m argument", []string{"python3", "-m"}, guard.PythonCommand{}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := guard.ParsePython(tc.argv)
			if tc.err {
				require.ErrorIs(t, err, guard.ErrNotPython)
				return
			}
			require.NoError(t, err)
			require.Equal(t, tc.want, got)
		})
	}
}

func TestValidModule(t *testing.T) {
	for name, ok := range map[string]bool{"torch": true, "numpy.linalg": true, "_x1": true, "": false, "a-b": false, "1a": false, "a..b": false, "a.": false, "os;rm": false} {
		require.Equal(t, ok, guard.ValidModule(name), name)
	}
}
