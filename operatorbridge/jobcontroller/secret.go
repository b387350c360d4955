package jobcontroller

import (
	"context"
	"fmt"
	"maps"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	jobv1 "github.com/elastictraining/coordinator/api/v1"
	"github.com/elastictraining/coordinator/etcdauth"
)

// ensureJobSecret keeps the Secret <job>-etcd that the job's pods read, in
// the job's namespace and owned by the job: a copy of the sidecars' client
// certificate, so that a job in any namespace has it, and, with auth, the
// password of the job's etcd user, which is made or given the password
// again. A changed certificate (a rotation) is copied again.
func (t *term) ensureJobSecret(ctx context.Context, j Job) error {
	sc := t.cfg.Sidecar
	if !sc.jobSecret() {
		return nil
	}
	want := map[string][]byte{}
	if sc.EtcdSecret != "" {
		src, err := t.cfg.Kube.CoreV1().Secrets(sc.SecretNamespace).Get(ctx, sc.EtcdSecret, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("the sidecars' etcd certificate, Secret %s/%s: %w", sc.SecretNamespace, sc.EtcdSecret, err)
		}
		for _, k := range []string{"ca.crt", "tls.crt", "tls.key"} {
			want[k] = src.Data[k]
		}
	}
	secrets := t.cfg.Kube.CoreV1().Secrets(j.Namespace)
	name := JobSecretName(j.ID)
	have, err := secrets.Get(ctx, name, metav1.GetOptions{})
	missing := apierrors.IsNotFound(err)
	switch {
	case err == nil && !owns(have.OwnerReferences, j.Owner.UID):
		//lint:ignore ST1005 the message starts with a Kubernetes kind, spelled as Kubernetes spells it
		return fmt.Errorf("Secret %s exists and is not this job's", name)
	case err != nil && !missing:
		return fmt.Errorf("get Secret %s: %w", name, err)
	}
	if sc.Auth {
		password := ""
		if !missing {
			password = string(have.Data["password"])
		}
		if password == "" {
			if password, err = etcdauth.NewPassword(); err != nil {
				return err
			}
		}
		if t.users[j.ID] != password {
			if err := etcdauth.EnsureJobUser(ctx, t.cfg.Etcd, t.cfg.Keys, j.ID, password); err != nil {
				return err
			}
			t.users[j.ID] = password
			t.logger.Info("etcd user of the job's sidecars", "job", j.ID, "user", etcdauth.JobUser(j.ID))
		}
		want["user"], want["password"] = []byte(etcdauth.JobUser(j.ID)), []byte(password)
	}
	if missing {
		secret := &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: j.Namespace, Labels: map[string]string{jobv1.LabelJob: j.ID},
				OwnerReferences: []metav1.OwnerReference{j.Owner}},
			Data: want,
		}
		if _, err := secrets.Create(ctx, secret, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("create Secret %s: %w", name, err)
		}
		return nil
	}
	if maps.EqualFunc(have.Data, want, func(a, b []byte) bool { return string(a) == string(b) }) {
		return nil
	}
	next := have.DeepCopy()
	next.Data = want
	if _, err := secrets.Update(ctx, next, metav1.UpdateOptions{}); err != nil {
		return fmt.Errorf("update Secret %s: %w", name, err)
	}
	return nil
}
