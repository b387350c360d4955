package stats

import (
	"fmt"
	"slices"
	"time"
)

// Sorted returns the samples in increasing order.
func Sorted(samples []time.Duration) []time.Duration {
	s := slices.Clone(samples)
	slices.Sort(s)
	return s
}

// Quantile returns the q-quantile (0..1) of samples, by nearest rank.
func Quantile(samples []time.Duration, q float64) time.Duration {
	s := Sorted(samples)
	return s[min(int(q*float64(len(s))), len(s)-1)]
}

// Median is Quantile(samples, 0.5).
func Median(samples []time.Duration) time.Duration { return Quantile(samples, 0.5) }

// Ms renders d in whole milliseconds.
func Ms(d time.Duration) string { return fmt.Sprintf("%.0fms", float64(d)/float64(time.Millisecond)) }
