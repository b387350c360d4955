// Package timeline turns a job's events into its history: one entry per
// generation (when it started, its size, why, how long each step of its
// restart took), and draws it.
package timeline
