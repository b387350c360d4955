package etcdauth

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"

	"go.etcd.io/etcd/api/v3/v3rpc/rpctypes"
	clientv3 "go.etcd.io/etcd/client/v3"

	"github.com/elastictraining/coordinator/membership"
)

// Enable turns auth on if it is off, with a user root without password:
// etcd takes the common name of a client certificate, root for the
// coordinator's, as the user. Once on, only root may call it again.
func Enable(ctx context.Context, cli *clientv3.Client) error {
	status, err := cli.AuthStatus(ctx)
	if err != nil {
		return fmt.Errorf("etcd auth status: %w", err)
	}
	if status.Enabled {
		return nil
	}
	if _, err := cli.UserAddWithOptions(ctx, "root", "", &clientv3.UserAddOptions{NoPassword: true}); err != nil && !errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		return fmt.Errorf("etcd user root: %w", err)
	}
	if _, err := cli.RoleAdd(ctx, "root"); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcd role root: %w", err)
	}
	if _, err := cli.UserGrantRole(ctx, "root", "root"); err != nil {
		return fmt.Errorf("grant etcd role root: %w", err)
	}
	if _, err := cli.AuthEnable(ctx); err != nil {
		return fmt.Errorf("enable etcd auth: %w", err)
	}
	return nil
}

// JobUser is the name of the user, and of its role, of a job's sidecars.
func JobUser(job string) string { return "job-" + job }

// EnsureJobUser makes the user of a job's sidecars, with password, and
// its role: read and write on the job's keys. A user that exists gets the
// password again, so that the password stored for the pods is the one
// etcd holds.
func EnsureJobUser(ctx context.Context, cli *clientv3.Client, keys membership.Keys, job, password string) error {
	name := JobUser(job)
	if _, err := cli.RoleAdd(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleAlreadyExist) {
		return fmt.Errorf("etcd role %s: %w", name, err)
	}
	prefix := keys.Job(job)
	if _, err := cli.RoleGrantPermission(ctx, name, prefix, clientv3.GetPrefixRangeEnd(prefix), clientv3.PermissionType(clientv3.PermReadWrite)); err != nil {
		return fmt.Errorf("grant etcd role %s the keys %s: %w", name, prefix, err)
	}
	_, err := cli.UserAdd(ctx, name, password)
	if errors.Is(err, rpctypes.ErrUserAlreadyExist) {
		_, err = cli.UserChangePassword(ctx, name, password)
	}
	if err != nil {
		return fmt.Errorf("etcd user %s: %w", name, err)
	}
	if _, err := cli.UserGrantRole(ctx, name, name); err != nil {
		return fmt.Errorf("grant etcd user %s its role: %w", name, err)
	}
	return nil
}

// DeleteJobUser removes the user and role of a job's sidecars.
func DeleteJobUser(ctx context.Context, cli *clientv3.Client, job string) error {
	name := JobUser(job)
	if _, err := cli.UserDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrUserNotFound) {
		return fmt.Errorf("delete etcd user %s: %w", name, err)
	}
	if _, err := cli.RoleDelete(ctx, name); err != nil && !errors.Is(err, rpctypes.ErrRoleNotFound) {
		return fmt.Errorf("delete etcd role %s: %w", name, err)
	}
	return nil
}

// NewPassword is a random password.
func NewPassword() (string, error) {
	b := make([]byte, 24)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return base64.RawURLEncoding.EncodeToString(b), nil
}
