// Package unserved tells the owner of a job resource that nothing runs it:
// an ElasticJob, PaddleJob or MSJob applied in a namespace the coordinator
// does not serve would otherwise sit there with no status and no Event.
// Such a job, once it has had no status for a while (no controller of
// any kind wrote one: another coordinator, paddle-operator or ms-operator
// would have), gets one Warning Event, NotServed, that names the
// namespaces served and what to do.
//
// It needs to list the job kinds in every namespace and to record Events
// there (deploy/base's ClusterRole elastic-coordinator-unserved); without
// that it logs once and does nothing. A coordinator that serves every
// namespace does not run it.
package unserved

import (
	"context"
	"fmt"
	"time"

	"github.com/hashicorp/go-hclog"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/operatorbridge/controller"
)

// Defaults of Config.
const (
	DefaultPeriod = 10 * time.Second
	DefaultGrace  = 20 * time.Second
)

// Config configures a Reporter. Clients.Namespace is the namespace the
// coordinator serves.
type Config struct {
	controller.Clients
	// Kinds are the job kinds looked at; api/v1's JobKinds if empty.
	Kinds []jobv1.JobKind
	// Period is how often every namespace is looked at; Grace how long a
	// job may have no status before it is said to be unserved.
	Period, Grace time.Duration
}

// Reporter says, of each job resource outside the served namespace that no
// controller gives a status, that it is not served. It implements the
// coordinator's LeaderTask.
type Reporter struct {
	cfg    Config
	logger hclog.Logger
}

// New checks cfg.
func New(cfg Config) (*Reporter, error) {
	if cfg.Kube == nil || cfg.Dynamic == nil {
		return nil, fmt.Errorf("unserved: kubernetes and dynamic clients are required")
	}
	if cfg.Namespace == "" {
		return nil, fmt.Errorf("unserved: a coordinator that serves every namespace leaves no job unserved")
	}
	if cfg.Logger == nil {
		cfg.Logger = hclog.NewNullLogger()
	}
	if len(cfg.Kinds) == 0 {
		cfg.Kinds = jobv1.JobKinds
	}
	if cfg.Period <= 0 {
		cfg.Period = DefaultPeriod
	}
	if cfg.Grace <= 0 {
		cfg.Grace = DefaultGrace
	}
	return &Reporter{cfg: cfg, logger: cfg.Logger.Named("unserved").With("served", cfg.Namespace)}, nil
}

// Lead looks every Period until ctx ends.
func (r *Reporter) Lead(ctx context.Context) error {
	clients := r.cfg.Clients
	clients.Namespace = metav1.NamespaceAll // Events go to each job's namespace
	term := controller.StartTerm(ctx, clients, "elastic-coordinator")
	defer term.Stop()
	said := map[types.UID]bool{}
	denied := map[string]bool{}
	tick := time.NewTicker(r.cfg.Period)
	defer tick.Stop()
	for {
		seen := map[types.UID]bool{}
		for _, k := range r.cfg.Kinds {
			r.look(ctx, k, term, said, seen, denied)
		}
		for uid := range said {
			if !seen[uid] {
				delete(said, uid) // gone, or served now
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// look lists kind k in every namespace and says each unserved job once.
func (r *Reporter) look(ctx context.Context, k jobv1.JobKind, term *controller.Term, said, seen map[types.UID]bool, denied map[string]bool) {
	list, err := r.cfg.Dynamic.Resource(k.Resource).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{ResourceVersion: "0"})
	switch {
	case apierrors.IsNotFound(err):
		return // the kind is not installed
	case apierrors.IsForbidden(err):
		if !denied[k.Name] {
			denied[k.Name] = true
			r.logger.Info("jobs in other namespaces not looked at: the coordinator may not list them (deploy/base's elastic-coordinator-unserved)", "kind", k.Name)
		}
		return
	case err != nil:
		if ctx.Err() == nil {
			r.logger.Debug("list failed; trying again later", "kind", k.Name, "error", err)
		}
		return
	}
	now := time.Now()
	for i := range list.Items {
		u := &list.Items[i]
		if u.GetNamespace() == r.cfg.Namespace || u.GetDeletionTimestamp() != nil || now.Sub(u.GetCreationTimestamp().Time) < r.cfg.Grace {
			continue
		}
		if status, ok := u.Object["status"].(map[string]any); ok && len(status) > 0 {
			continue // some controller serves it
		}
		seen[u.GetUID()] = true
		if said[u.GetUID()] {
			continue
		}
		said[u.GetUID()] = true
		r.logger.Warn("job not served", "kind", k.Name, "namespace", u.GetNamespace(), "job", u.GetName())
		term.Recorder.Eventf(u, corev1.EventTypeWarning, "NotServed",
			"no coordinator serves namespace %s: the coordinator in %s serves %s's there. Apply the job in namespace %s (kubectl apply -n %s), or install deploy/all-namespaces/",
			u.GetNamespace(), r.cfg.Namespace, k.Name, r.cfg.Namespace, r.cfg.Namespace)
	}
}
