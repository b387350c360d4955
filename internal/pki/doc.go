// Package pki issues the certificates of a deployment: a CA, and from it
// the etcd members' server and peer certificates and the client
// certificates of the coordinator and the sidecars. ECDSA P-256 keys.
package pki
