package jobclient_test

import (
	"context"
	"errors"
	"fmt"

	"github.com/elastictraining/coordinator/internal/testkit/etcdtest"
	"github.com/elastictraining/coordinator/jobclient"
	"github.com/elastictraining/coordinator/membership"
)

// The client of the jobs in an etcd: what `coordinator scale`, `status` and
// `jobs` do, from a program. Here the etcd is an embedded one; a program
// connects to the coordinator's.
func Example() {
	ctx := context.Background()
	cli, stop := etcdtest.ForExample()
	defer stop()

	jobs := jobclient.New(cli, membership.DefaultKeys())

	// A job that does not exist is not created by a scale unless asked:
	// a mistyped id must not start a job that waits for ever.
	_, err := jobs.Resize(ctx, jobclient.ScaleRequest{Job: "resnet", NP: membership.FixedNP(4)})
	fmt.Println(errors.Is(err, jobclient.ErrJobNotFound))

	np, err := membership.ParseNP("2:4")
	if err != nil {
		panic(err)
	}
	written, err := jobs.Resize(ctx, jobclient.ScaleRequest{Job: "resnet", NP: np, Create: true})
	if err != nil {
		panic(err)
	}
	fmt.Println("np", written.Spec.NP)

	// No coordinator runs here: the job waits for one, and for its nodes.
	st, err := jobs.Status(ctx, "resnet")
	if err != nil {
		panic(err)
	}
	fmt.Println(st.Phase)
	// Output:
	// true
	// np 2:4
	// Waiting
}
