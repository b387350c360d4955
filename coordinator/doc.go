// Package coordinator is the leader's loop. Every replica campaigns for one
// election key in etcd; the one that holds it follows every job's keys and
// runs one actor per job. An actor keeps what etcd holds of its job, asks
// the pure function decide what to do next, and commits the decision (plan,
// status, events) in one transaction fenced on the election key, so a
// replica that lost the lead cannot write.
//
// Programs that read or change jobs use package jobclient; nodes take part
// through package presence.
package coordinator
