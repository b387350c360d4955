// Package printers is how a job reads to people and scripts: the views
// that `status`, `jobs` and `events` print (and that the job pages
// render), their tables, and their JSON, which scripts read (durations in
// seconds, np as {"min":N,"max":M}). The commands keep their flags and
// the order of things, as kubectl keeps its printers apart from its
// commands.
//
// The views are built from the records of package membership, read
// through package jobclient; the printers write to an io.Writer and never
// to etcd.
package printers
