package sqstest_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

// clock is a manual clock for the server.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func newClock() *clock { return &clock{now: time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)} }

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) Advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

// setup starts a server that the test closes when it ends, a client with
// retries off, and a queue; it returns the queue's URL.
func setup(t *testing.T, queue string, attrs map[string]string, opts ...sqstest.Option) (*sqstest.Server, *sqs.Client, string) {
	t.Helper()
	srv, err := sqstest.New(opts...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	c := newClient(t, srv, 1)
	return srv, c, createQueue(t, c, queue, attrs)
}

// newClient returns a real SDK client for srv with its own HTTP transport.
// attempts is the SDK's RetryMaxAttempts; 1 turns retries off.
func newClient(t *testing.T, srv *sqstest.Server, attempts int) *sqs.Client {
	return newClientOn(t, srv, &http.Transport{}, attempts)
}

// newClientOn is newClient with a given transport.
func newClientOn(t *testing.T, srv *sqstest.Server, transport *http.Transport, attempts int) *sqs.Client {
	t.Helper()
	t.Cleanup(transport.CloseIdleConnections)
	cfg := aws.Config{
		Region:      "us-east-1",
		Credentials: credentials.NewStaticCredentialsProvider("AKIDTEST", "secret", ""),
		HTTPClient:  &http.Client{Transport: transport},
	}
	return sqs.NewFromConfig(cfg, func(o *sqs.Options) {
		o.BaseEndpoint = aws.String(srv.URL())
		o.RetryMaxAttempts = attempts
	})
}

// createQueue creates a queue and returns its URL.
func createQueue(t *testing.T, c *sqs.Client, name string, attrs map[string]string) string {
	t.Helper()
	out, err := c.CreateQueue(context.Background(), &sqs.CreateQueueInput{QueueName: aws.String(name), Attributes: attrs})
	if err != nil {
		t.Fatalf("CreateQueue %s: %v", name, err)
	}
	return aws.ToString(out.QueueUrl)
}

// eventually waits until cond holds, failing the test after ten seconds.
// It synchronises with work on other goroutines; it asserts no timing.
func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("gave up waiting: %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
