package main

import (
	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/guard"
	"github.com/elastictraining/coordinator/membership"
)

// hangFlags are the flags of the job's hang watch, which `run` and a
// sidecar that stores the job's spec give it.
type hangFlags struct {
	timeout, startup string
	maxRestarts      int
}

func (h *hangFlags) register(fs *pflag.FlagSet) {
	least := guard.MinHangTimeout.String()
	fs.StringVar(&h.timeout, "hang-timeout", "auto",
		"restart the generation when a rank makes no progress this long (optimizer steps, elastic.beat(), elastic.save()), at least "+least+"; "+
			"auto: learned from the job's step intervals, at least 5s; 0: no hang watching")
	fs.StringVar(&h.startup, "startup-timeout", "auto",
		"how long a restarted generation's first step may take before its ranks count as hung, at least "+least+"; auto: at least 2m, learned; 0: no limit")
	fs.IntVar(&h.maxRestarts, "max-hang-restarts", membership.DefaultMaxHangRestarts, "restarts the job may spend on hung ranks, besides --max-restarts")
	checkGiven(fs, "hang-timeout", func() error { _, err := hangDuration("--hang-timeout", h.timeout); return err })
	checkGiven(fs, "startup-timeout", func() error { _, err := hangDuration("--startup-timeout", h.startup); return err })
}

// apply sets the spec's hang fields, or says in one line which flag is
// wrong.
func (h *hangFlags) apply(s *membership.Spec) error {
	timeout, err := hangDuration("--hang-timeout", h.timeout)
	if err != nil {
		return err
	}
	startup, err := hangDuration("--startup-timeout", h.startup)
	if err != nil {
		return err
	}
	if h.maxRestarts < 0 {
		return usagef("--max-hang-restarts %d: must not be negative", h.maxRestarts)
	}
	s.HangTimeout, s.StartupTimeout, s.MaxHangRestarts = timeout, startup, h.maxRestarts
	return nil
}

// hangDuration reads a timeout flag: nil for auto, a duration otherwise
// ("0" alone turns it off), none shorter than the hang watch honours.
func hangDuration(flag, value string) (*membership.Duration, error) {
	d, err := membership.ParseHangTimeout(value, guard.MinHangTimeout)
	if err != nil {
		return nil, usagef("%s %v", flag, err)
	}
	return d, nil
}
