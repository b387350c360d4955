// Package policysim replays a trace of elastic jobs on a simulated cluster
// under a choice of scaler, in the style of the Pollux/AdaptDL simulator:
// no control plane, one-second steps, a job's progress by a speedup curve
// of its workers, and a fixed cost for every restart. It compares the
// autoscale policy with EDL's one-trainer-per-pass rule and with no
// autoscaling at all.
package policysim
