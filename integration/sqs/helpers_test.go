// Package sqs_test runs the SQS adapter against a real SQS endpoint through the
// real aws-sdk-go-v2: the in-process sqstest, or SQS_ENDPOINT when it is set
// (LocalStack, AWS). Fault injection exists only in-process; tests that need
// it skip against SQS_ENDPOINT.
package sqs_test

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	brokersqs "github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
)

// env is the SQS endpoint of one test.
type env struct {
	endpoint string
	srv      *sqstest.Server // nil when the test runs against SQS_ENDPOINT
	suffix   string          // makes queue names unique on a shared endpoint
}

// newEnv starts an in-process server, or uses SQS_ENDPOINT when it is set.
func newEnv(t testing.TB) *env {
	t.Helper()
	e := &env{endpoint: harness.SQSEndpoint(t)}
	if e.endpoint != "" {
		b := make([]byte, 4)
		_, _ = rand.Read(b)
		e.suffix = "-" + hex.EncodeToString(b)
		return e
	}
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	e.srv, e.endpoint = srv, srv.URL()
	return e
}

// faults returns the in-process server, skipping the test when there is none.
func (e *env) faults(t testing.TB) *sqstest.Server {
	t.Helper()
	if e.srv == nil {
		t.Skip("needs fault injection, which only the in-process server has; unset SQS_ENDPOINT to run it")
	}
	return e.srv
}

// noBackoff makes SDK retries immediate, so that tests never wait on them.
var noBackoff = retry.BackoffDelayerFunc(func(int, error) (time.Duration, error) { return 0, nil })

// client returns a real SDK client for endpoint with its own HTTP transport,
// retries off unless a modifier says otherwise.
func client(t testing.TB, endpoint string, httpClient *http.Client, mods ...func(*awssqs.Options)) *awssqs.Client {
	t.Helper()
	if httpClient == nil {
		httpClient = &http.Client{Transport: &http.Transport{}}
	}
	if tr, ok := httpClient.Transport.(*http.Transport); ok {
		t.Cleanup(tr.CloseIdleConnections)
	}
	cfg := aws.Config{
		Region: envOr("AWS_REGION", "us-east-1"),
		Credentials: credentials.NewStaticCredentialsProvider(
			envOr("AWS_ACCESS_KEY_ID", "test"), envOr("AWS_SECRET_ACCESS_KEY", "test"), os.Getenv("AWS_SESSION_TOKEN")),
		HTTPClient: httpClient,
	}
	return awssqs.NewFromConfig(cfg, append([]func(*awssqs.Options){func(o *awssqs.Options) {
		o.BaseEndpoint = aws.String(endpoint)
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = 1
			so.Backoff = noBackoff
		})
	}}, mods...)...)
}

// retries makes a client try up to attempts times, with a retry quota of
// quota tokens (ratelimit.None when quota is 0).
func retries(attempts int, quota uint) func(*awssqs.Options) {
	return func(o *awssqs.Options) {
		o.Retryer = retry.NewStandard(func(so *retry.StandardOptions) {
			so.MaxAttempts = attempts
			so.Backoff = noBackoff
			so.RateLimiter = ratelimit.None
			if quota > 0 {
				so.RateLimiter = ratelimit.NewTokenRateLimit(quota)
			}
		})
	}
}

func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}

// queue creates a queue named base (plus the env's suffix) and returns its name.
func (e *env) queue(t testing.TB, c *awssqs.Client, base string, attrs map[string]string) string {
	t.Helper()
	name := base + e.suffix
	if before, ok := strings.CutSuffix(base, ".fifo"); ok {
		name = before + e.suffix + ".fifo"
	}
	if _, err := c.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs}); err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	if e.srv == nil { // a shared endpoint keeps queues; the in-process server goes with the test
		t.Cleanup(func() {
			if out, err := c.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: &name}); err == nil {
				_, _ = c.DeleteQueue(context.Background(), &awssqs.DeleteQueueInput{QueueUrl: out.QueueUrl})
			}
		})
	}
	return name
}

// guard is a registry on a fake clock and a publisher over it.
type guard struct {
	clock *fakeclock.Clock
	reg   *registry.Registry
	pub   *brokersqs.Publisher
}

// newGuard returns a publisher over c whose circuits follow policy.
func newGuard(t testing.TB, c brokersqs.API, policy breaker.Policy, opts ...brokersqs.Option) *guard {
	t.Helper()
	clock := fakeclock.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	reg, err := registry.New(registry.Policy{Circuit: policy}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := brokersqs.NewPublisher(c, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return &guard{clock: clock, reg: reg, pub: pub}
}

// snapshot returns the circuit of the named queue.
func (g *guard) snapshot(t testing.TB, queue string) breaker.Snapshot {
	t.Helper()
	c, err := g.reg.Circuit(dest(queue))
	if err != nil {
		t.Fatal(err)
	}
	return c.Snapshot()
}

func dest(queue string) transport.Destination {
	return transport.Destination{Broker: brokersqs.Broker, Name: queue}
}

// msgs returns n messages with bodies "<prefix>-<i>".
func msgs(prefix string, n int) []transport.Message {
	out := make([]transport.Message, n)
	for i := range out {
		out[i] = transport.Message{Value: []byte(prefix + "-" + strconv.Itoa(i))}
	}
	return out
}

// eventually waits until cond holds, failing the test after ten seconds. It
// waits for work on another goroutine to reach the server; it asserts no
// timing.
func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
