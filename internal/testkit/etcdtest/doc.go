// Package etcdtest starts a real embedded etcd member for a test and gives
// the test clients of it. Nothing here mocks etcd.
package etcdtest
