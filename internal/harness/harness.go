// Package harness finds, starts and checks the real servers that the integration tests
// in integration/ run against: PostgreSQL, RabbitMQ, Kafka (in-process kfake), SQS,
// DynamoDB (dynalite, from npm), Redis, MariaDB and NATS JetStream.
//
// Every server has a lookup function that needs no testing.TB (Postgres, RabbitMQ,
// Kafka, SQS, DynamoDB, Redis, NATS): it reads the server's environment variable, falls back
// to the default for a development machine and returns an *UnavailableError when the
// server cannot be reached. The test helpers (PostgresSchema, AMQPURL, KafkaBrokers,
// SQSEndpoint, Dynalite, RedisAddr, NATSURL) call the lookup and hand any error to Require, which
// fails the test under CI=true and otherwise skips it with one line saying how to start
// the server.
//
// Environment variables:
//
//	DATABASE_URL       PostgreSQL DSN; default postgres://postgres@127.0.0.1:5432/test?sslmode=disable
//	AMQP_URL           RabbitMQ URL; default amqp://guest:guest@127.0.0.1:5672/
//	KAFKA_BROKERS      comma-separated host:port list; unset means an in-process kfake cluster
//	SQS_ENDPOINT       SQS endpoint URL; unset means the caller's in-process test server
//	DYNAMODB_ENDPOINT  DynamoDB endpoint URL; unset means a dynalite child process
//	REDIS_ADDR         Redis host:port; default 127.0.0.1:6379
//	NATS_URL           NATS server URL (JetStream on); default nats://127.0.0.1:4222
//	MYSQL_DSN          MySQL or MariaDB DSN (go-sql-driver/mysql form); default root@tcp(127.0.0.1:3306)/test
//	CI                 "true" (or any true value of strconv.ParseBool) turns skips into failures
//
// When DATABASE_URL, AMQP_URL, REDIS_ADDR, NATS_URL or MYSQL_DSN is unset and the local server is down, the
// harness tries once per test binary to start it with the machine's own command.
// scripts/services.sh does the same before a CI run.
package harness

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// Service names used in messages and in UnavailableError.Service.
const (
	ServicePostgres = "PostgreSQL"
	ServiceRabbitMQ = "RabbitMQ"
	serviceKafka    = "Kafka"
	serviceSQS      = "SQS"
	ServiceDynamoDB = "DynamoDB"
	ServiceRedis    = "Redis"
)

// dialTimeout bounds one reachability probe; servers here are on loopback.
const dialTimeout = 2 * time.Second

// ErrUnavailable is matched by every error the harness returns for a server that cannot
// be reached or started.
var ErrUnavailable = errors.New("harness: server unavailable")

// UnavailableError reports a server the tests need but cannot use. It matches
// ErrUnavailable with errors.Is and unwraps to the underlying cause.
type UnavailableError struct {
	Service string // one of the Service constants
	Addr    string // address or endpoint tried; empty when none was known
	Hint    string // one sentence saying how to start the server
	Err     error  // the cause, for example a dial error
}

// Error returns a one-line description of the unavailable server and its cause.
func (e *UnavailableError) Error() string {
	msg := "harness: " + e.Service + " unavailable"
	if e.Addr != "" {
		msg += " at " + e.Addr
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

// Unwrap returns the cause.
func (e *UnavailableError) Unwrap() error { return e.Err }

// Is reports whether target is ErrUnavailable.
func (e *UnavailableError) Is(target error) bool { return target == ErrUnavailable }

// inCI reports whether the CI environment variable holds a true value, in which case a
// missing server fails tests instead of skipping them.
func inCI() bool {
	ci, err := strconv.ParseBool(os.Getenv("CI"))
	return err == nil && ci
}

// Require does nothing when err is nil. Otherwise it ends the test: under CI=true with
// t.Fatalf naming the service and the error, elsewhere with t.Skipf and one line that
// also says how to start the server (taken from an *UnavailableError in err's chain).
func Require(t testing.TB, service string, err error) {
	t.Helper()
	if err == nil {
		return
	}
	line := oneLine(err.Error())
	if inCI() {
		t.Fatalf("%s is required under CI=true: %s", service, line)
		return
	}
	var ue *UnavailableError
	if errors.As(err, &ue) && ue.Hint != "" {
		t.Skipf("%s; %s", line, ue.Hint)
		return
	}
	t.Skipf("%s unavailable: %s; see scripts/services.sh", service, line)
}

// oneLine folds a multi-line message (command output, for example) into one line.
func oneLine(s string) string {
	return strings.Join(strings.Fields(s), " ")
}

// envOr returns the environment variable's value, or def when it is unset or empty,
// and whether the default was used.
func envOr(name, def string) (value string, isDefault bool) {
	if v := strings.TrimSpace(os.Getenv(name)); v != "" {
		return v, false
	}
	return def, true
}

// dial reports whether something accepts TCP connections at hostport.
func dial(hostport string) error {
	c, err := net.DialTimeout("tcp", hostport, dialTimeout)
	if err != nil {
		return err
	}
	return c.Close()
}

// waitDial polls hostport until it accepts a connection or d has passed.
func waitDial(hostport string, d time.Duration) error {
	deadline := time.Now().Add(d)
	for {
		err := dial(hostport)
		if err == nil || time.Now().After(deadline) {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// defaultPorts maps URL schemes to the port used when a URL names none.
var defaultPorts = map[string]string{
	"http": "80", "https": "443",
	"amqp": "5672", "amqps": "5671",
	"postgres": "5432", "postgresql": "5432",
}

// hostPort returns host:port of a URL, filling in the scheme's default port.
func hostPort(rawURL string) (string, error) {
	u, err := url.Parse(rawURL)
	if err != nil {
		return "", fmt.Errorf("harness: %w", err)
	}
	if u.Hostname() == "" {
		return "", fmt.Errorf("harness: no host in %q", rawURL)
	}
	if u.Port() != "" {
		return u.Host, nil
	}
	port, ok := defaultPorts[u.Scheme]
	if !ok {
		return "", fmt.Errorf("harness: no port in %q", rawURL)
	}
	return net.JoinHostPort(u.Hostname(), port), nil
}

// endpointFromEnv reads an optional endpoint URL variable. Unset returns "", nil; set
// returns it once its host accepts TCP connections, or an *UnavailableError.
func endpointFromEnv(service, name, hint string) (string, error) {
	endpoint, unset := envOr(name, "")
	if unset {
		return "", nil
	}
	hp, err := hostPort(endpoint)
	if err == nil {
		err = dial(hp)
	}
	if err != nil {
		return "", &UnavailableError{Service: service, Addr: endpoint, Hint: hint, Err: err}
	}
	return endpoint, nil
}

// startForTest starts a private server with start in a temporary directory of t,
// failing or skipping the test through Require when it cannot, and closes it when the
// test ends, whether or not the test passed.
func startForTest[S interface{ Close() error }](t testing.TB, service string, start func(dir string) (S, error)) S {
	t.Helper()
	s, err := start(t.TempDir())
	Require(t, service, err)
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("%v", err)
		}
	})
	return s
}

// reach dials addr. When nothing answers there and addr is the default address, it
// starts the machine's server (start, at most once per test binary through once) and
// waits for it (wait). Then check, when not nil, asks the server whether it is the one
// the tests need.
func reach(addr string, isDefault bool, once *sync.Once, start func(), wait func() error, check func(addr string) error) error {
	err := dial(addr)
	if err != nil && isDefault {
		once.Do(start)
		err = wait()
	}
	if err == nil && check != nil {
		err = check(addr)
	}
	return err
}
