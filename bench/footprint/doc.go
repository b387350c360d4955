// Command footprint measures what every training pod pays for the
// sidecar: the binary's size, the sidecar process's resident memory once
// its node runs, and the guard's beside it, for the full coordinator
// binary and for the sidecar's own (`make build`'s bin/coordinator-sidecar).
//
//	go run ./bench/footprint -coordinator bin/coordinator -sidecar bin/coordinator-sidecar
package main
