package presence_test

import (
	"context"
	"fmt"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/membership"
	"github.com/elastictraining/coordinator/presence"
)

// A node is present in its job while its sidecar renews its lease; at the
// fence deadline, armed on the node's own clock before etcd may expire the
// lease, the node must have killed its processes (OnLost). Leave revokes
// the lease: the coordinator sees the node go at once.
func ExampleRegister() {
	ctx := context.Background()
	cli, stop := etcdtest.ForExample()
	defer stop()

	keys := membership.DefaultKeys()
	reg, err := presence.Register(ctx, presence.RegistrationConfig{
		Place: presence.Place{Client: cli, Keys: keys, Job: "resnet", TTL: 5 * time.Second,
			Node: membership.Node{ID: "worker-0", Role: membership.RoleWorker, Host: "10.0.0.7", Ports: []int{6170}, NProc: 1, MasterPort: 29500}},
		OnDeadline: func(lease clientv3.LeaseID, fenceAt time.Time) {}, // the guard's deadline moves here
		OnLost:     func() {},                                          // kill every process of the node here
	})
	if err != nil {
		panic(err)
	}
	fmt.Println(reg.Key())
	fmt.Println(reg.Record().State)

	if err := reg.Leave(ctx); err != nil {
		panic(err)
	}
	resp, err := cli.Get(ctx, reg.Key())
	if err != nil {
		panic(err)
	}
	fmt.Println(len(resp.Kvs), "records after leaving")
	// Output:
	// /elastic/jobs/resnet/nodes/worker-0
	// waiting
	// 0 records after leaving
}
