package main

import (
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// torchftLogs are torchft_trainer.py's logs of 2 replicas, replica 1
// killed at 1010 ms and started again at once: replica 0 steps alone in
// quorum 3, then quorum 4 takes the new process in, which heals in its
// first step (one participant, rank -1) and participates from the next.
// gen is how a step's generation is written from its quorum id and its
// participants.
func torchftLogs(gen func(quorum, world int) string) []*proc {
	survivor := &proc{pid: 10, started: at(-5000)}
	survivor.steps = append(survivor.steps, steps(gen(2, 2), 0, 2, 1, 0, 50)...)
	survivor.steps = append(survivor.steps, steps(gen(3, 1), 0, 1, 51, 1100, 95)...)
	survivor.steps = append(survivor.steps, steps(gen(4, 1), 0, 1, 146, 3000, 1)...)
	survivor.steps = append(survivor.steps, steps(gen(4, 2), 0, 2, 147, 3020, 300)...)
	killed := &proc{pid: 11, started: at(-5000), steps: steps(gen(2, 2), 1, 2, 1, 0, 50)}
	restarted := &proc{pid: 12, started: at(1050)}
	restarted.steps = append(restarted.steps, steps(gen(4, 1), -1, 1, 146, 3000, 1)...)
	restarted.steps = append(restarted.steps, steps(gen(4, 2), 1, 2, 147, 3020, 300)...)
	return []*proc{survivor, killed, restarted}
}

func TestRecoveryReadsTorchftLogs(t *testing.T) {
	// torchft_trainer.py's generation: "<quorum id>.<participants>".
	procs := torchftLogs(func(quorum, world int) string { return fmt.Sprintf("%d.%d", quorum, world) })
	kill := at(1010)

	alone, ok := recovery(procs, kill, 1)
	require.True(t, ok, "the survivor stepping alone")
	assert.Equal(t, 90*time.Millisecond, alone.Recovery)
	assert.Equal(t, 0, alone.Lost, "the survivor lost no step")
	assert.Equal(t, 0, alone.New)

	grown, ok := recovery(procs, kill, 2)
	require.True(t, ok, "both replicas stepping with 2 participants")
	assert.Equal(t, 2010*time.Millisecond, grown.Recovery)
	assert.Equal(t, 1970*time.Millisecond, grown.Start, "the restarted replica's start to its first step as a participant")
	assert.Equal(t, 1, grown.New)
}

// With the quorum id alone as the generation, the survivor's steps with 2
// participants continue the run its healing step began with 1: no run of
// its would start with 2 participants, and the job would never be seen
// grown back. Hence the participants in torchft_trainer.py's generation.
func TestRecoveryMissesTorchftGrowthByQuorumIDAlone(t *testing.T) {
	procs := torchftLogs(func(quorum, _ int) string { return strconv.Itoa(quorum) })
	_, ok := recovery(procs, at(1010), 2)
	assert.False(t, ok)
}

func TestTorchftSettingsDescribe(t *testing.T) {
	s := torchftSettings{heartbeat: time.Second, join: 10 * time.Second, pgTimeout: 2500 * time.Millisecond}
	assert.Equal(t, "torchft_lighthouse --min_replicas 1 --quorum_tick_ms 100 --heartbeat_timeout_ms 1000 --join_timeout_ms 10000; ProcessGroupGloo timeout 2.5s", s.describe())
	assert.Equal(t, []string{"--pg-timeout-s", "2.5"}, s.trainerArgs())
	assert.Equal(t, []string{"--bind", "127.0.0.1:29510"}, s.lighthouseArgs(29510)[:2])
}
