package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/transport"
)

// sourceFlags say where "brokerguard circuits" finds the circuits.
type sourceFlags struct {
	url, token, table, endpoint, redisAddr, redisPrefix, stateDir, idPrefix string
}

func (f *sourceFlags) define(fs *flag.FlagSet) {
	fs.StringVar(&f.url, "url", "", "the admin handler's base URL, e.g. http://svc:8080/admin (env BROKERGUARD_ADMIN_URL)")
	fs.StringVar(&f.token, "token", "", "bearer token for mutations through --url (env BROKERGUARD_ADMIN_TOKEN)")
	fs.StringVar(&f.table, "dynamodb-table", "", "the DynamoDB table of the shared circuits (env BROKERGUARD_DYNAMODB_TABLE)")
	fs.StringVar(&f.endpoint, "dynamodb-endpoint", "", "DynamoDB endpoint URL instead of AWS's (env DYNAMODB_ENDPOINT)")
	fs.StringVar(&f.redisAddr, "redis-addr", "", "host:port of the Redis of the shared circuits (env REDIS_ADDR)")
	fs.StringVar(&f.redisPrefix, "redis-prefix", "", "the service's Redis key prefix (env BROKERGUARD_REDIS_PREFIX; default "+redisstate.DefaultKeyPrefix+")")
	fs.StringVar(&f.stateDir, "state-dir", "", "the filestate directory of the shared circuits (env BROKERGUARD_STATE_DIR)")
	fs.StringVar(&f.idPrefix, "identity-prefix", "", "the service's WithIdentityPrefix, put before DESTINATION (env BROKERGUARD_IDENTITY_PREFIX)")
}

// open returns the one source the flags, or else the environment, name.
func (f *sourceFlags) open(cmd string, timeout time.Duration, stderr io.Writer) (circuitSource, error) {
	sources := []struct {
		flag, env string
		v         *string
	}{
		{"--url", "BROKERGUARD_ADMIN_URL", &f.url},
		{"--dynamodb-table", "BROKERGUARD_DYNAMODB_TABLE", &f.table},
		{"--redis-addr", "REDIS_ADDR", &f.redisAddr},
		{"--state-dir", "BROKERGUARD_STATE_DIR", &f.stateDir},
	}
	var given, names []string
	for _, s := range sources {
		names = append(names, s.flag)
		if *s.v != "" {
			given = append(given, s.flag)
		}
	}
	if len(given) == 0 { // no flag: the environment must name one source
		for _, s := range sources {
			if *s.v = os.Getenv(s.env); *s.v != "" {
				given = append(given, s.env)
			}
		}
	}
	switch len(given) {
	case 0:
		fmt.Fprintf(stderr, "brokerguard circuits: give one of %s (or its environment variable)\n", strings.Join(names, ", "))
		return nil, errUsage
	case 1:
	default:
		fmt.Fprintf(stderr, "brokerguard circuits: give one place to find circuits, not %s\n", strings.Join(given, " and "))
		return nil, errUsage
	}
	for _, o := range []struct {
		v   *string
		env string
	}{{&f.token, "BROKERGUARD_ADMIN_TOKEN"}, {&f.endpoint, "DYNAMODB_ENDPOINT"},
		{&f.redisPrefix, "BROKERGUARD_REDIS_PREFIX"}, {&f.idPrefix, "BROKERGUARD_IDENTITY_PREFIX"}} {
		if *o.v == "" {
			*o.v = os.Getenv(o.env)
		}
	}
	if f.url != "" {
		if cmd != "list" && cmd != "show" && f.token == "" {
			fmt.Fprintln(stderr, "brokerguard circuits "+cmd+": --token (or BROKERGUARD_ADMIN_TOKEN) is required")
			return nil, errUsage
		}
		return adminClient{base: strings.TrimSuffix(f.url, "/"), token: f.token, http: &http.Client{Timeout: timeout}}, nil
	}
	s := &sharedSource{prefix: f.idPrefix, stderr: stderr, done: func() {}}
	s.op = &sharedstate.Operator{Scope: breaker.SharedDependency, IOTimeout: timeout}
	switch {
	case f.table != "":
		region, creds := awsFromEnv()
		opts := dynamodb.Options{Region: region, Credentials: creds}
		if f.endpoint != "" {
			opts.BaseEndpoint = aws.String(f.endpoint)
		}
		s.op.Driver, s.where = dynamo.NewDriver(dynamodb.New(opts), f.table), "DynamoDB table "+f.table
	case f.redisAddr != "":
		client := redis.NewClient(&redis.Options{Addr: f.redisAddr, ContextTimeoutEnabled: true})
		var opts []redisstate.Option
		if f.redisPrefix != "" {
			opts = append(opts, redisstate.WithKeyPrefix(f.redisPrefix))
		}
		d, err := redisstate.NewDriver(client, opts...)
		if err != nil {
			client.Close()
			return nil, err
		}
		s.op.Driver, s.where, s.done = d, "Redis "+f.redisAddr, func() { client.Close() }
	default:
		// Open would create a missing directory; a typo must not look like an empty store.
		if fi, err := os.Stat(f.stateDir); err != nil || !fi.IsDir() {
			return nil, &exitError{code: exitRefused, err: fmt.Errorf("--state-dir %s: not a directory (%v)", f.stateDir, err)}
		}
		store, err := filestate.Open(f.stateDir)
		if err != nil {
			return nil, err
		}
		s.op.Driver, s.op.Scope, s.where = store.Driver(), breaker.SingleHost, "state directory "+store.Root()
	}
	return s, nil
}

// awsFromEnv returns the region and credentials of this command's AWS clients, from
// the standard environment variables ("test" keys, for a local server, when unset).
func awsFromEnv() (string, aws.CredentialsProvider) {
	return envOr("AWS_REGION", "us-east-1"), credentials.NewStaticCredentialsProvider(envOr("AWS_ACCESS_KEY_ID", "test"),
		envOr("AWS_SECRET_ACCESS_KEY", "test"), os.Getenv("AWS_SESSION_TOKEN"))
}

// sharedSource reads and holds circuits in their shared state, through a
// sharedstate.Operator: no service and no policy needed.
type sharedSource struct {
	op     *sharedstate.Operator
	prefix string // the service's identity prefix
	where  string // the store, for messages
	stderr io.Writer
	done   func()
}

func (s *sharedSource) close() { s.done() }

// list reads every record under the prefix. A record that cannot be read does not
// hide the others: they are listed and the errors returned together.
func (s *sharedSource) list(ctx context.Context) (circuitList, error) {
	out := circuitList{Now: time.Now(), Mutations: true, Circuits: []circuitRow{}}
	var ids []string
	var errs []error
	if err := s.op.List(ctx, s.prefix, func(id string) error { ids = append(ids, id); return nil }); err != nil {
		errs = append(errs, fmt.Errorf("%s: %w", s.where, err))
	}
	if len(ids) == 0 && len(errs) == 0 {
		// Most often a prefix that is not the service's: say so rather than print an
		// empty table and exit 0.
		return out, &exitError{code: exitNotFound, err: fmt.Errorf("no circuits found in %s under identity prefix %q "+
			"(a circuit has a record once a replica has used it; are --identity-prefix and, for Redis, --redis-prefix the service's?)", s.where, s.prefix)}
	}
	slices.Sort(ids)
	for _, id := range ids {
		st, err := s.op.Status(ctx, id)
		switch {
		case errors.Is(err, sharedstate.ErrNotFound): // removed since it was listed
		case err != nil:
			errs = append(errs, s.fail(id, err))
		default:
			out.Circuits = append(out.Circuits, s.row(st, out.Now))
		}
	}
	return out, errors.Join(errs...)
}

func (s *sharedSource) show(ctx context.Context, dest string) (circuitRow, error) {
	st, err := s.op.Status(ctx, s.prefix+dest)
	if err != nil {
		return circuitRow{}, s.fail(s.prefix+dest, err)
	}
	return s.row(st, time.Now()), nil
}

func (s *sharedSource) hold(ctx context.Context, action, dest string, h holdSpec) (circuitRow, error) {
	id, now := s.prefix+dest, time.Now()
	refuse := func(format string, args ...any) (circuitRow, error) {
		return circuitRow{}, &exitError{code: exitRefused, err: fmt.Errorf(format, args...)}
	}
	var until time.Time
	switch {
	case action == "clear":
	case h.holdFor < 0:
		return refuse("--for: must be positive")
	case h.holdFor > 0:
		until = now.Add(h.holdFor)
	default:
		t, err := time.Parse(time.RFC3339, h.until)
		if err != nil {
			return refuse("--until: not an RFC 3339 time: %q", h.until)
		}
		if !t.After(now) {
			return refuse("--until: is in the past")
		}
		until = t
	}
	var st sharedstate.Status
	var err error
	switch action {
	case "force-open":
		st, err = s.op.ForceOpen(ctx, id, until)
	case "force-close":
		st, err = s.op.ForceClose(ctx, id, until)
	default:
		st, err = s.op.ClearOverride(ctx, id)
	}
	if he, ok := errors.AsType[*backend.HoldError](err); ok {
		return refuse("%s: %s", map[bool]string{true: "--for", false: "--until"}[h.holdFor > 0], he.Reason)
	}
	if err != nil {
		return circuitRow{}, s.fail(id, err)
	}
	// No service sees this change to tell its audit log: say it here.
	audit := "brokerguard: " + action + " " + id + " in " + s.where
	if !until.IsZero() {
		audit += " until " + until.UTC().Format(time.RFC3339)
	}
	if h.reason != "" {
		audit += ": " + h.reason
	}
	fmt.Fprintln(s.stderr, esc(audit))
	return s.row(st, time.Now()), nil
}

// fail turns an Operator's error about id into the command's.
func (s *sharedSource) fail(id string, err error) error {
	if errors.Is(err, sharedstate.ErrNotFound) {
		return &exitError{code: exitNotFound, err: fmt.Errorf("no circuit %q in %s (a circuit has a record once a replica has used it; is --identity-prefix the service's?)", id, s.where)}
	}
	return fmt.Errorf("%s: %w", s.where, err)
}

// row presents a record as the admin handler presents a circuit, with its details.
func (s *sharedSource) row(st sharedstate.Status, now time.Time) circuitRow {
	dest := strings.TrimPrefix(st.Identity, s.prefix)
	d, err := transport.ParseDestination(dest)
	c := admin.View(d, st.Snapshot, now)
	if err != nil { // an identity given to New, not a registry's destination
		c.Destination, c.Broker, c.Name = dest, "", dest
	}
	r := st.Record
	det := &recordDetail{Version: r.Version, Reason: r.Reason, FailedProbes: r.FailedProbes, Policy: r.Policy}
	if r.Since != 0 {
		since := time.Unix(0, r.Since).UTC()
		det.Since = &since
	}
	for _, l := range r.Leases {
		det.Leases = append(det.Leases, leaseView{Owner: l.Owner, Expires: time.Unix(0, l.Expires).UTC()})
	}
	return circuitRow{Circuit: c, Identity: st.Identity, Record: det}
}
