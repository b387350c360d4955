package english_test

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/elastictraining/coordinator/english"
)

func TestCount(t *testing.T) {
	for want, got := range map[string]string{
		"1 node":        english.Count(1, "node"),
		"0 nodes":       english.Count(0, "node"),
		"2 nodes":       english.Count(2, "node"),
		"3 processes":   english.Count(3, "process"),
		"1 process":     english.Count(1, "process"),
		"2 retries":     english.Count(2, "retry"),
		"2 days":        english.Count(2, "day"),
		"16 ranks":      english.Count(16, "rank"),
		"2 generations": english.Count(2, "generation"),
	} {
		assert.Equal(t, want, got)
	}
}
