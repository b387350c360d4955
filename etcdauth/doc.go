// Package etcdauth manages etcd's auth for the coordinator: it turns auth
// on with a root user reached by client certificate, and gives each job's
// sidecars a user whose role reaches the job's keys and nothing else.
package etcdauth
