package memckpt

import (
	"context"
	"encoding/hex"
	"fmt"
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/elastictraining/coordinator/guard"
)

func TestMain(m *testing.M) {
	// The test binary re-executed as a guard and its fence watchdogs, for
	// the launcher of a frozen host.
	if len(os.Args) > 1 && os.Args[1] == "guard" {
		os.Exit(guard.Main(os.Args[2:], os.Stdout, os.Stderr))
	}
	if len(os.Args) > 1 && os.Args[1] == "fence-watch" {
		os.Exit(guard.WatchMain(os.Args[2:], os.Stderr))
	}
	switch os.Getenv("MEMCKPT_HELPER") {
	case "half-push":
		// A sidecar that dies in the middle of a push.
		halfPush()
		return
	case "module-dir":
		// A sidecar's module directory, owned by a process of its own.
		moduleDirOwner()
		return
	case "frozen-host":
		// A node's sidecar in a process of its own, to be frozen.
		frozenHost()
		return
	}
	goleak.VerifyTestMain(m)
}

// halfPush authenticates to the peer at MEMCKPT_PEER with the job's secret,
// announces a copy of MEMCKPT_SIZE bytes, sends half of it, says so on
// stdout and waits to be killed.
func halfPush() {
	secret, _ := hex.DecodeString(os.Getenv("MEMCKPT_SECRET"))
	a, err := newAuth(os.Getenv("MEMCKPT_JOB"), secret)
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	conn, err := a.dial(context.Background(), os.Getenv("MEMCKPT_PEER"))
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	body := make([]byte, 8<<20)
	for i := range body {
		body[i] = byte(i)
	}
	m := Meta{Job: os.Getenv("MEMCKPT_JOB"), Generation: 9, Seq: 1, Node: "dying", Size: int64(len(body)), CRC32: checksum(body)}
	h := Header{Op: OpPush, BodyLen: uint64(len(body))}
	meta, _ := jsonMarshal(m)
	h.MetaLen = uint32(len(meta))
	hb := h.Encode()
	_, _ = conn.Write(append(hb[:], meta...))
	_, _ = conn.Write(body[:len(body)/2])
	fmt.Println("half sent")
	select {}
}
