// Package tcpproxy is a TCP proxy for fault tests: it stands between a
// process and a server and can cut the network (bytes are dropped silently,
// as in a partition), hold it (bytes wait, as on a link that stalls) and
// heal it again.
package tcpproxy
