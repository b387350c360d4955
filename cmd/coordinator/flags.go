package main

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"os"
	"os/signal"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/hashicorp/go-hclog"
	"github.com/spf13/pflag"

	"github.com/elastictraining/coordinator/guard"
	clientv3 "go.etcd.io/etcd/client/v3"
	"google.golang.org/grpc/status"

	"github.com/elastictraining/coordinator/internal/etcdclient"
	"github.com/elastictraining/coordinator/internal/etcdprobe"
	"github.com/elastictraining/coordinator/membership"
)

// fromEnv returns the value of the first set variable of names, or def.
func fromEnv(env lookupEnv, def string, names ...string) string {
	for _, n := range names {
		if v, ok := env(n); ok && v != "" {
			return v
		}
	}
	return def
}

// envNote is the part of a flag's help that names its variables.
func envNote(names ...string) string {
	return " (env " + strings.Join(names, ", ") + ")"
}

// etcdFlags are the flags of every command that talks to etcd.
type etcdFlags struct {
	endpoints string
	// endpointsOrigin names the flag or variable the endpoints came from.
	endpointsOrigin origin
	cacert          string
	cert            string
	key             string
	user            string
	password        string
	prefix          string
	dialTimeout     time.Duration
	envErr          error // a variable that could not be read
	fs              *pflag.FlagSet
}

func (f *etcdFlags) register(fs *pflag.FlagSet, env lookupEnv) {
	f.fs = fs
	fs.StringVar(&f.endpoints, "etcd-endpoints", fromEnv(env, "", "ELASTIC_ETCD_ENDPOINTS", "PADDLE_ELASTIC_SERVER"),
		"comma-separated etcd endpoints, e.g. https://10.0.0.5:2379"+envNote("ELASTIC_ETCD_ENDPOINTS", "PADDLE_ELASTIC_SERVER"))
	f.endpointsOrigin = fromVariable(fs, "etcd-endpoints", env, "ELASTIC_ETCD_ENDPOINTS", "PADDLE_ELASTIC_SERVER")
	fs.StringVar(&f.cacert, "cacert", fromEnv(env, "", "ELASTIC_ETCD_CACERT"), "verify etcd's certificate with this CA bundle"+envNote("ELASTIC_ETCD_CACERT"))
	fs.StringVar(&f.cert, "cert", fromEnv(env, "", "ELASTIC_ETCD_CERT"), "client certificate for etcd"+envNote("ELASTIC_ETCD_CERT"))
	fs.StringVar(&f.key, "key", fromEnv(env, "", "ELASTIC_ETCD_KEY"), "client key for etcd"+envNote("ELASTIC_ETCD_KEY"))
	fs.StringVar(&f.user, "user", fromEnv(env, "", "ELASTIC_ETCD_USER"), "etcd user; the password is read from ELASTIC_ETCD_PASSWORD"+envNote("ELASTIC_ETCD_USER"))
	fs.StringVar(&f.prefix, "prefix", fromEnv(env, membership.DefaultPrefix, "ELASTIC_PREFIX"), "root of the keys in etcd"+envNote("ELASTIC_PREFIX"))
	dial := 5 * time.Second
	if v := fromEnv(env, "", "ELASTIC_DIAL_TIMEOUT"); v != "" {
		if d, err := time.ParseDuration(v); err == nil && d > 0 {
			dial = d
		} else {
			f.envErr = fmt.Errorf("ELASTIC_DIAL_TIMEOUT %q: want a positive duration such as 10s", v)
		}
	}
	fs.DurationVar(&f.dialTimeout, "dial-timeout", dial, "how long to wait for etcd before giving up"+envNote("ELASTIC_DIAL_TIMEOUT"))
	f.password = fromEnv(env, "", "ELASTIC_ETCD_PASSWORD")
	checkGiven(fs, "etcd-endpoints", func() error { return checkEndpoints("--etcd-endpoints", f.endpoints) })
	checkGiven(fs, "prefix", func() error { _, err := f.keys(); return err })
	checkGiven(fs, "cacert", func() error { return checkFile("--cacert", f.cacert) })
	checkGiven(fs, "cert", func() error { return checkFile("--cert", f.cert) })
	checkGiven(fs, "key", func() error { return checkFile("--key", f.key) })
}

// keys validates the prefix.
func (f *etcdFlags) keys() (membership.Keys, error) {
	k, err := membership.NewKeys(f.prefix)
	if err != nil {
		return membership.Keys{}, usageError{fmt.Errorf("--prefix: %w", err)}
	}
	return k, nil
}

// untilSignalled is ctx until SIGTERM or SIGINT, for a daemon, with the
// etcd client the flags ask for; stop closes the client and lets the
// signals go.
func (f *etcdFlags) untilSignalled(ctx context.Context) (_ context.Context, _ *clientv3.Client, _ membership.Keys, stop func(), _ error) {
	ctx, stopSignals := signal.NotifyContext(ctx, syscall.SIGTERM, syscall.SIGINT)
	cli, keys, err := f.client(ctx, etcdprobe.WaitForEtcd)
	if err != nil {
		stopSignals()
		return nil, nil, keys, nil, err
	}
	return ctx, cli, keys, func() { cli.Close(); stopSignals() }, nil
}

// client builds an etcd client from the flags and checks that etcd answers
// within the dial timeout, so that an unreachable etcd is one clear error;
// wait says whether a refused connection is waited out (a daemon) or said
// at once (a command).
func (f *etcdFlags) client(ctx context.Context, wait etcdprobe.Wait) (*clientv3.Client, membership.Keys, error) {
	if f.envErr != nil && !f.fs.Changed("dial-timeout") {
		return nil, membership.Keys{}, usageError{f.envErr}
	}
	keys, err := f.keys()
	if err != nil {
		return nil, keys, err
	}
	endpoints := splitEndpoints(f.endpoints)
	if len(endpoints) == 0 {
		return nil, keys, usagef("--etcd-endpoints is required (or ELASTIC_ETCD_ENDPOINTS, PADDLE_ELASTIC_SERVER)")
	}
	if err := checkEndpoints(f.endpointsOrigin, f.endpoints); err != nil {
		return nil, keys, err
	}
	if f.user != "" && f.password == "" {
		return nil, keys, usagef("--user %s needs its password in ELASTIC_ETCD_PASSWORD", f.user)
	}
	tlsConfig, err := f.tls(endpoints)
	if err != nil {
		return nil, keys, err
	}
	// What answers at the endpoints, found out at once: a wrong port or a
	// TLS mismatch is not a timeout. One endpoint that may be etcd is
	// enough to go on.
	answering, err := etcdprobe.Endpoints(ctx, endpoints, tlsConfig, f.dialTimeout, wait)
	if err != nil {
		return nil, keys, fmt.Errorf("etcd at %s: %w", strings.Join(endpoints, ","), err)
	}
	cli, err := etcdclient.New(etcdclient.Config{
		Endpoints: endpoints, DialTimeout: f.dialTimeout, TLS: tlsConfig, Username: f.user, Password: f.password,
	})
	if err != nil {
		return nil, keys, fmt.Errorf("etcd client: %w", err)
	}
	// Status needs no permission on any key, so a user confined to one
	// job's prefix passes this check too. The endpoint the probe found
	// answering goes first, and each gets the whole dial timeout: a
	// cluster's member that is down must not use it up for the others.
	order := append([]string{answering}, slices.DeleteFunc(slices.Clone(endpoints), func(e string) bool { return e == answering })...)
	var lastErr error
	for _, e := range order {
		checkCtx, cancel := context.WithTimeout(ctx, f.dialTimeout)
		_, lastErr = cli.Status(checkCtx, e)
		cancel()
		if lastErr == nil {
			return cli, keys, nil
		}
	}
	_ = cli.Close()
	return nil, keys, fmt.Errorf("etcd at %s: %w", strings.Join(endpoints, ","), explainEtcdError(lastErr))
}

func explainEtcdError(err error) error {
	if errors.Is(err, context.DeadlineExceeded) {
		return errors.New("unreachable (no answer within the dial timeout)")
	}
	if s, ok := status.FromError(err); ok {
		// A gRPC status reads as "rpc error: code = ... desc = ...".
		return fmt.Errorf("%s (%s)", s.Message(), s.Code())
	}
	return err
}

func (f *etcdFlags) tls(endpoints []string) (*tls.Config, error) {
	secure := f.cacert != "" || f.cert != ""
	for _, e := range endpoints {
		secure = secure || strings.HasPrefix(e, "https://")
	}
	if !secure {
		return nil, nil
	}
	if (f.cert == "") != (f.key == "") {
		return nil, usagef("--cert and --key go together")
	}
	cfg := &tls.Config{MinVersion: tls.VersionTLS12}
	if f.cacert != "" {
		pem, err := os.ReadFile(f.cacert)
		if err != nil {
			return nil, usagef("--cacert: %v", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, usagef("--cacert %s: no PEM certificate in it", f.cacert)
		}
		cfg.RootCAs = pool
	}
	if f.cert != "" {
		pair, err := tls.LoadX509KeyPair(f.cert, f.key)
		if err != nil {
			return nil, usagef("--cert/--key: %v", err)
		}
		cfg.Certificates = []tls.Certificate{pair}
	}
	return cfg, nil
}

// origin says where a flag's value came from, so that an error names what
// the user set: the flag, or the variable its default was read from.
type origin struct {
	fs       *pflag.FlagSet
	flag     string
	variable string // the variable the default came from, if any
}

// String is "--flag", or the variable's name when the flag was not given
// and a variable was.
func (o origin) String() string {
	if o.fs != nil && !o.fs.Changed(o.flag) && o.variable != "" {
		return o.variable
	}
	return "--" + o.flag
}

// fromVariable is the origin of a flag whose default is read from the
// first set variable of names.
func fromVariable(fs *pflag.FlagSet, flag string, env lookupEnv, names ...string) origin {
	o := origin{fs: fs, flag: flag}
	for _, n := range names {
		if v, ok := env(n); ok && v != "" {
			o.variable = n
			break
		}
	}
	return o
}

// envString registers a string flag whose default is the first set
// variable of names, or def; the help names the variables.
func envString(fs *pflag.FlagSet, p *string, flag string, env lookupEnv, def, usage string, names ...string) origin {
	o := origin{fs: fs, flag: flag}
	for _, n := range names {
		if v, ok := env(n); ok && v != "" {
			def, o.variable = v, n
			break
		}
	}
	if len(names) > 0 {
		usage += envNote(names...)
	}
	fs.StringVar(p, flag, def, usage)
	return o
}

// jobOption is a command's --job: the job's name as given, and where.
type jobOption struct {
	name   string
	origin origin
}

// jobVariables are the variables a job's name is read from.
var jobVariables = []string{"ELASTIC_JOB_ID", "PADDLE_ELASTIC_JOB_ID"}

const jobUsage = "job name: a DNS-1123 label, or any name PaddlePaddle takes (stored under an id derived from it)"

func (j *jobOption) register(fs *pflag.FlagSet, env lookupEnv, def string, names ...string) {
	j.origin = envString(fs, &j.name, "job", env, def, jobUsage, names...)
	checkGiven(fs, "job", func() error { _, err := j.id(); return err })
}

// id validates the name and returns the id the job is stored under.
func (j *jobOption) id() (string, error) {
	if j.name == "" {
		return "", usagef("--job is required (or %s)", strings.Join(jobVariables, ", "))
	}
	id, err := membership.JobIDFor(j.name)
	if err != nil {
		return "", usageError{fmt.Errorf("%s: %w", j.origin, err)}
	}
	return id, nil
}

// displayName is how messages name the job: its name, and the id it is
// stored under when that differs.
func (j *jobOption) displayName(id string) string {
	if j.name == id {
		return id
	}
	return fmt.Sprintf("%q (id %s)", j.name, id)
}

// specName is the name a new spec records: none for a name that is its
// own id.
func (j *jobOption) specName(id string) string {
	if j.name == id {
		return ""
	}
	return j.name
}

// parseNP parses an np value, naming where it came from in an error.
func parseNP(np string, from origin) (membership.NP, error) {
	n, err := membership.ParseNP(np)
	if err != nil {
		return n, usageError{fmt.Errorf("%s: %w", from, err)}
	}
	return n, nil
}

// newLogger logs to w at the level named by level.
func newLogger(w io.Writer, name, level string) (hclog.Logger, error) {
	if err := checkLogLevel(level); err != nil {
		return nil, err
	}
	return hclog.New(&hclog.LoggerOptions{Name: name, Level: hclog.LevelFromString(level), Output: w}), nil
}

// inPlaceUsage is the help of --in-place, on sidecar and run.
const inPlaceUsage = "the command trains in place (elastic.run): a node that holds no rank (a spare, a node whose trainer failed) " +
	"starts it ahead, runs its start-up and keeps it waiting in elastic.run (a started spare), and a node is cold until it holds one"

// preloadUsage is the help of --preload, on sidecar and run.
const preloadUsage = "Python modules (comma-separated) that a warm interpreter per training process imports ahead of the next generation, " +
	"which then starts in it without the interpreter's start and these imports; only for a command whose program is python, python3, python3.N"

// parsePreload reads --preload's comma-separated list of Python modules.
func parsePreload(list string, from origin) ([]string, error) {
	var mods []string
	for _, m := range strings.Split(list, ",") {
		m = strings.TrimSpace(m)
		if m == "" {
			continue
		}
		if !guard.ValidModule(m) {
			return nil, usagef("%s: %q is not a Python module name (want a dotted name like torch or numpy.linalg)", from, m)
		}
		mods = append(mods, m)
	}
	return mods, nil
}
