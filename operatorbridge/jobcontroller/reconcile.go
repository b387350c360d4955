package jobcontroller

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strings"

	clientv3 "go.etcd.io/etcd/client/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/english"
	"github.com/elastictraining/coordinator/etcdauth"
	"github.com/elastictraining/coordinator/membership"
)

// reconcile makes etcd and Kubernetes hold what one job asks for, and
// reports. A write that fails returns an error: the job is queued again
// with backoff. A spec the controller cannot run is reported and waits for
// the next change of the resource.
func (t *term) reconcile(ctx context.Context, k *servedKind, ns, name string) error {
	u := t.object(k, ns, name)
	if u == nil {
		return t.forget(ctx, k, ns, name)
	}
	if u.GetDeletionTimestamp() != nil {
		// The garbage collector removes what the job owns; a deletion in
		// the foreground waits for the job's Workloads, whose finalizer
		// is the controller's to take off.
		return t.deleteWorkloadsOf(ctx, k, ns, name, func(uid types.UID) bool { return uid == u.GetUID() })
	}
	job, err := k.job(u)
	if err != nil {
		t.warnOnce(u, "InvalidSpec", err.Error())
		return t.writeStatus(ctx, k, u, nil, []string{err.Error()})
	}
	var problems []string
	var failed []error
	fail := func(err error) {
		problems, failed = append(problems, err.Error()), append(failed, err)
	}
	// A job of a Kueue queue runs as its Workload is admitted. While
	// that cannot be read, nothing is written: what runs keeps to its
	// admission, what waits keeps waiting.
	q, err := t.admit(ctx, k, u, &job)
	if err != nil {
		return errors.Join(err, t.writeStatus(ctx, k, u, &job, []string{err.Error()}))
	}
	if q != nil && q.problem != "" {
		problems = append(problems, q.problem)
	}
	// The job id is claimed first: pods must not be made for a job whose
	// id another holds. The spec is written last, once the pods it asks
	// for have a workload.
	if taken, err := t.writeSpec(ctx, u, job, false); err != nil {
		return errors.Join(err, t.writeStatus(ctx, k, u, &job, []string{err.Error()}))
	} else if taken != "" {
		t.warnOnce(u, "JobIDTaken", taken)
		return t.writeStatus(ctx, k, u, &job, []string{taken})
	}
	if err := t.ensureJobSecret(ctx, job); err != nil {
		return errors.Join(err, t.writeStatus(ctx, k, u, &job, []string{err.Error()}))
	}
	if err := t.ensureService(ctx, u, job); err != nil {
		fail(err)
	}
	if job.Clamped != "" {
		problems = append(problems, job.Clamped)
		t.warnOnce(u, "ReplicasClamped", job.Clamped)
	}
	var waitImage error
	for _, r := range job.Roles {
		if err := t.ensureStatefulSet(ctx, u, job, r); err != nil {
			var bad templateError
			var unreadable unreadableImage
			switch {
			case errors.As(err, &bad):
				problems = append(problems, err.Error())
				t.warnOnce(u, "InvalidTemplate", err.Error())
				continue
			case errors.As(err, &unreadable):
				// Said in the status and once as an Event; tried again.
				problems = append(problems, err.Error())
				t.warnOnce(u, "ImageUnreadable", err.Error())
				waitImage = err
				continue
			}
			fail(err)
		}
	}
	if err := t.removeDroppedRoles(ctx, u, job); err != nil {
		fail(err)
	}
	if taken, err := t.writeSpec(ctx, u, job, true); err != nil {
		fail(err)
	} else if taken != "" {
		// Claimed meanwhile by another writer.
		problems = append(problems, taken)
		t.warnOnce(u, "JobIDTaken", taken)
	}
	if err := t.writeStatus(ctx, k, u, &job, problems); err != nil {
		failed = append(failed, err)
	}
	if len(failed) == 0 && waitImage != nil {
		return waitImage
	}
	if len(failed) == 0 && q != nil && q.recheck > 0 {
		return recheckAfter(q.recheck)
	}
	return errors.Join(failed...)
}

// writeSpec stores the job's spec in etcd unless it is stored already, or
// with write false only claims the job id. The records of an earlier
// resource of the same kind and name (deleted while no controller ran) are
// removed, so that the new job starts afresh. A job id held by something
// else is not touched: what holds it is returned.
func (t *term) writeSpec(ctx context.Context, u *unstructured.Unstructured, j Job, write bool) (taken string, err error) {
	key := t.cfg.Keys.Spec(j.ID)
	resp, err := t.cfg.Etcd.Get(ctx, key)
	if err != nil {
		return "", fmt.Errorf("read the etcd spec of job %s: %w", j.ID, err)
	}
	cmp := clientv3.Compare(clientv3.CreateRevision(key), "=", 0)
	var before *membership.Spec
	var malformed error
	if len(resp.Kvs) == 1 {
		stored, err := membership.DecodeSpec(resp.Kvs[0].Value)
		switch {
		case err == nil && reflect.DeepEqual(stored, j.Spec):
			return "", nil
		case err == nil && stored.Owner == "":
			return fmt.Sprintf("job id %s is in use in etcd by a job that no resource runs (sidecars or `coordinator scale` made it): rename this %s, or delete the job's keys %s",
				j.ID, j.Owner.Kind, t.cfg.Keys.Job(j.ID)), nil
		case err == nil && stored.Owner != j.Spec.Owner:
			if !sameResource(stored.Owner, j.Spec.Owner) {
				return fmt.Sprintf("job id %s is in use in etcd by %s", j.ID, stored.Owner), nil
			}
			if err := t.deleteRecords(ctx, j.ID, stored.Owner); err != nil {
				return "", err
			}
			if !write {
				return "", nil
			}
		case err == nil:
			before = &stored
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		default:
			// Malformed: this resource's spec replaces it.
			malformed = err
			cmp = clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision)
		}
	}
	if !write {
		return "", nil
	}
	val, err := membership.Encode(j.Spec)
	if err != nil {
		return "", err
	}
	txn, err := t.cfg.Etcd.Txn(ctx).If(append([]clientv3.Cmp{cmp}, t.fenced...)...).Then(clientv3.OpPut(key, val)).Commit()
	if err != nil {
		return "", fmt.Errorf("write the etcd spec of job %s: %w", j.ID, err)
	}
	if !txn.Succeeded {
		return "", fmt.Errorf("the etcd spec of job %s changed while it was written, or the lead was lost", j.ID)
	}
	switch {
	case malformed != nil:
		t.logger.Warn("the job's etcd spec was malformed; replaced with the resource's", "job", j.ID, "malformed", malformed)
		t.Recorder.Eventf(u, corev1.EventTypeWarning, "MalformedSpecReplaced", "the etcd spec of job %s was malformed (%s); replaced with this %s's, np %s",
			j.ID, english.OneLine(malformed.Error()), j.Owner.Kind, j.Spec.Workers())
	case before == nil:
		t.logger.Info("job spec written", "job", j.ID, "np", j.Spec.Workers().String())
	case before.Workers() != j.Spec.Workers():
		t.logger.Info("job scaled", "job", j.ID, "from", before.Workers().String(), "to", j.Spec.Workers().String())
		t.Recorder.Eventf(u, corev1.EventTypeNormal, "Scaling", "np %s → %s", before.Workers(), j.Spec.Workers())
	default:
		t.logger.Info("job spec updated", "job", j.ID)
	}
	return "", nil
}

// sameResource reports whether two owners name the same kind, namespace
// and name (of different incarnations, if their UIDs differ).
func sameResource(a, b string) bool {
	i, j := strings.LastIndexByte(a, '/'), strings.LastIndexByte(b, '/')
	return i > 0 && j > 0 && a[:i] == b[:j]
}

// forget removes the etcd records of a job whose resource is gone.
func (t *term) forget(ctx context.Context, k *servedKind, ns, name string) error {
	rec := t.recordsOf(name)
	delete(t.warned, key(k.Name, ns, name))
	delete(t.reports, key(k.Name, ns, name))
	delete(t.queued, key(k.Name, ns, name))
	if err := t.forgetWorkloads(ctx, k, ns, name); err != nil {
		return err
	}
	if rec.Spec == nil || !strings.HasPrefix(rec.Spec.Owner, k.Name+"/"+ns+"/"+name+"/") {
		return nil
	}
	if err := t.deleteRecords(ctx, name, rec.Spec.Owner); err != nil {
		return err
	}
	if t.cfg.Sidecar.Auth {
		delete(t.users, name)
		return etcdauth.DeleteJobUser(ctx, t.cfg.Etcd, name)
	}
	return nil
}

// previousNodes is why a job's keys are not removed yet: nodes of the
// resource they were written for are registered, or evicted and not yet
// certainly fenced. Their trainers may still run; a job started afresh
// under the same id would give their ranks to new processes beside them.
type previousNodes struct {
	nodes, evictions int64
	owner            string
}

func (e previousNodes) Error() string {
	return fmt.Sprintf("waiting for the pods of %s to stop: %d nodes registered, %d evicted and not yet fenced", e.owner, e.nodes, e.evictions)
}

// deleteRecords removes every key of a job — spec, plan, status, events —
// if its spec is still owner's, once no node of the job is registered and
// no eviction waits to be fenced.
func (t *term) deleteRecords(ctx context.Context, job, owner string) error {
	var left previousNodes
	// None may come between the count and the delete: the delete holds
	// only while nothing under these prefixes changed since.
	conds := slices.Clone(t.fenced)
	for prefix, into := range map[string]*int64{t.cfg.Keys.Nodes(job): &left.nodes, t.cfg.Keys.Evictions(job): &left.evictions} {
		resp, err := t.cfg.Etcd.Get(ctx, prefix, clientv3.WithPrefix(), clientv3.WithCountOnly())
		if err != nil {
			return fmt.Errorf("read the nodes of job %s: %w", job, err)
		}
		*into = resp.Count
		conds = append(conds, clientv3.Compare(clientv3.ModRevision(prefix), "<", resp.Header.Revision+1).WithPrefix())
	}
	if left.nodes+left.evictions > 0 {
		left.owner = owner
		return left
	}
	key := t.cfg.Keys.Spec(job)
	resp, err := t.cfg.Etcd.Get(ctx, key)
	if err != nil {
		return fmt.Errorf("read the etcd spec of job %s: %w", job, err)
	}
	if len(resp.Kvs) != 1 {
		return nil
	}
	if s, err := membership.DecodeSpec(resp.Kvs[0].Value); err != nil || s.Owner != owner {
		return nil
	}
	txn, err := t.cfg.Etcd.Txn(ctx).
		If(append(conds, clientv3.Compare(clientv3.ModRevision(key), "=", resp.Kvs[0].ModRevision))...).
		Then(clientv3.OpDelete(t.cfg.Keys.Job(job), clientv3.WithPrefix())).Commit()
	if err != nil {
		return fmt.Errorf("delete the etcd records of job %s: %w", job, err)
	}
	if !txn.Succeeded {
		return fmt.Errorf("the records of job %s changed while they were deleted, or the lead was lost", job)
	}
	t.logger.Info("job records deleted from etcd: its resource is gone", "job", job, "owner", owner)
	return nil
}

// ensureService keeps the headless Service that governs the job's
// StatefulSets, so that every pod has a DNS name.
func (t *term) ensureService(ctx context.Context, u *unstructured.Unstructured, j Job) error {
	services := t.cfg.Kube.CoreV1().Services(j.Namespace)
	have, err := services.Get(ctx, j.ID, metav1.GetOptions{})
	switch {
	case err == nil && owns(have.OwnerReferences, j.Owner.UID):
		return nil
	case err == nil:
		//lint:ignore ST1005 the message starts with a Kubernetes kind, spelled as Kubernetes spells it
		return fmt.Errorf("Service %s exists and is not this job's", j.ID)
	case !apierrors.IsNotFound(err):
		return fmt.Errorf("get Service %s: %w", j.ID, err)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{
			Name: j.ID, Namespace: j.Namespace, Labels: map[string]string{jobv1.LabelJob: j.ID},
			OwnerReferences: []metav1.OwnerReference{j.Owner},
		},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone, Selector: map[string]string{jobv1.LabelJob: j.ID},
			PublishNotReadyAddresses: true, // peers are resolved before they are ready
		},
	}
	if _, err := services.Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create Service %s: %w", j.ID, err)
	}
	t.Recorder.Eventf(u, corev1.EventTypeNormal, "Created", "Service %s", j.ID)
	return nil
}

// ensureStatefulSet creates a role's StatefulSet, or brings its template up
// to date. Its replicas are the bridge's to set once it exists.
func (t *term) ensureStatefulSet(ctx context.Context, u *unstructured.Unstructured, j Job, r Role) error {
	want, err := statefulSet(j, r, t.cfg.Sidecar, func(c *corev1.Container) ([]string, error) { return t.command(ctx, c) })
	if err != nil {
		return err
	}
	sets := t.cfg.Kube.AppsV1().StatefulSets(j.Namespace)
	have, err := t.sets.StatefulSets(j.Namespace).Get(want.Name)
	switch {
	case apierrors.IsNotFound(err):
		_, err := sets.Create(ctx, want, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// Not in the cache: not labelled as a job's, or made a moment
			// ago. Ask the API server whose it is.
			live, err := sets.Get(ctx, want.Name, metav1.GetOptions{})
			if err == nil && !owns(live.OwnerReferences, j.Owner.UID) {
				return fmt.Errorf("StatefulSet %s exists and is not this job's", want.Name)
			}
			return err
		}
		if err != nil {
			return fmt.Errorf("create StatefulSet %s: %w", want.Name, err)
		}
		t.logger.Info("created", "job", j.ID, "statefulset", want.Name, "replicas", r.Replicas)
		t.Recorder.Eventf(u, corev1.EventTypeNormal, "Created", "StatefulSet %s with %s", want.Name, english.Count(r.Replicas, "pod"))
		return nil
	case err != nil:
		return fmt.Errorf("get StatefulSet %s: %w", want.Name, err)
	case !owns(have.OwnerReferences, j.Owner.UID):
		return fmt.Errorf("StatefulSet %s exists and is not this job's", want.Name)
	case have.Annotations[hashAnnote] == want.Annotations[hashAnnote]:
		return nil
	}
	next := have.DeepCopy()
	next.Spec.Template, next.Labels = want.Spec.Template, want.Labels
	if next.Annotations == nil {
		next.Annotations = map[string]string{}
	}
	next.Annotations[hashAnnote] = want.Annotations[hashAnnote]
	if _, err := sets.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update StatefulSet %s: %w", want.Name, err)
	}
	t.Recorder.Eventf(u, corev1.EventTypeNormal, "Updated", "StatefulSet %s: new pod template, for the pods created from now on", want.Name)
	return nil
}

// command is what a container runs: its command and arguments, or else
// its image's entrypoint with its arguments or the image's.
func (t *term) command(ctx context.Context, c *corev1.Container) ([]string, error) {
	if len(c.Command) > 0 {
		return append(slices.Clone(c.Command), c.Args...), nil
	}
	entrypoint, cmd, err := t.cfg.Entrypoints.lookup(ctx, c.Image)
	if err != nil {
		return nil, err
	}
	args := c.Args
	if len(args) == 0 {
		args = cmd
	}
	if len(entrypoint)+len(args) == 0 {
		return nil, fmt.Errorf("image %s has neither entrypoint nor command", c.Image)
	}
	return append(slices.Clone(entrypoint), args...), nil
}

// removeDroppedRoles deletes the StatefulSets of roles the job no longer
// has.
func (t *term) removeDroppedRoles(ctx context.Context, u *unstructured.Unstructured, j Job) error {
	have, err := t.sets.StatefulSets(j.Namespace).List(labels.SelectorFromSet(labels.Set{jobv1.LabelJob: j.ID}))
	if err != nil {
		return err
	}
	keep := map[string]bool{}
	for _, r := range j.Roles {
		keep[StatefulSetName(j.ID, r.Name)] = true
	}
	for _, s := range have {
		if keep[s.Name] || !owns(s.OwnerReferences, j.Owner.UID) {
			continue
		}
		if err := deleteStatefulSet(ctx, t, s); err != nil {
			return err
		}
		t.Recorder.Eventf(u, corev1.EventTypeNormal, "Deleted", "StatefulSet %s: its role is gone from the spec", s.Name)
	}
	return nil
}

func deleteStatefulSet(ctx context.Context, t *term, s *appsv1.StatefulSet) error {
	uid := s.UID
	err := t.cfg.Kube.AppsV1().StatefulSets(s.Namespace).Delete(ctx, s.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid}})
	if err != nil && !apierrors.IsNotFound(err) {
		return fmt.Errorf("delete StatefulSet %s: %w", s.Name, err)
	}
	return nil
}

func owns(refs []metav1.OwnerReference, uid types.UID) bool {
	for _, r := range refs {
		if r.UID == uid {
			return true
		}
	}
	return false
}
