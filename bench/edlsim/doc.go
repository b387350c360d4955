// Command edlsim replays synthetic traces of elastic jobs on a simulated
// cluster of the seed's size (133 nodes, 2,348 CPU) under three scalers —
// no autoscaling, EDL's one trainer a pass, and the autoscale policy — and
// writes a table of average job completion time, pending time,
// utilization and restarts. No control plane: the policy alone
// (bench/internal/policysim).
package main
