package sqs_test

import (
	"bufio"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"path"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"
	"github.com/aws/smithy-go"
	smithyhttp "github.com/aws/smithy-go/transport/http"

	"github.com/brokerguard/brokerguard/breaker"
	brokersqs "github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
)

// tripOnFirst opens a circuit on its first Failure, so that a row's effect on
// the circuit shows in one publish.
var tripOnFirst = breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}

// classifyRow produces one row of the package's Classify table with the real
// SDK, through the publisher.
type classifyRow struct {
	name   string
	faults bool // needs the in-process server
	want   breaker.Outcome
	// publish makes the error happen and returns it with the queue's circuit.
	publish func(t *testing.T, e *env) (breaker.Snapshot, error)
	// check asserts that err is what the SDK really returns for the row.
	check func(t *testing.T, err error)
}

// publishTo sends msgs to target (a queue name or URL) through a fresh
// publisher over c and returns the error and the queue's circuit afterwards.
func publishTo(t *testing.T, ctx context.Context, c *awssqs.Client, target string, ms ...transport.Message) (breaker.Snapshot, error) {
	t.Helper()
	g := newGuard(t, c, tripOnFirst)
	err := g.pub.Publish(ctx, dest(target), ms...)
	return g.snapshot(t, path.Base(target)), err
}

// withFault publishes msgs to a new queue that answers every request with f.
func withFault(f sqstest.Fault, ms ...transport.Message) func(*testing.T, *env) (breaker.Snapshot, error) {
	return func(t *testing.T, e *env) (breaker.Snapshot, error) {
		c := client(t, e.endpoint, nil)
		q := e.queue(t, c, "fault", nil)
		e.srv.SetFault(q, f)
		return publishTo(t, context.Background(), c, e.srv.QueueURL(q), ms...)
	}
}

func code(want string) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		apiErr, ok := errors.AsType[smithy.APIError](err)
		if !ok || apiErr.ErrorCode() != want {
			t.Fatalf("error %v (%T): want an API error with code %s", err, err, want)
		}
	}
}

func is(target error) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if !errors.Is(err, target) {
			t.Fatalf("error %v (%T): want errors.Is %v", err, err, target)
		}
	}
}

func as[T error]() func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		if _, ok := errors.AsType[T](err); !ok {
			var zero T
			t.Fatalf("error %v (%T): want errors.As %T", err, err, zero)
		}
	}
}

func both(checks ...func(*testing.T, error)) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		for _, c := range checks {
			c(t, err)
		}
	}
}

// Every row of the package's table, with the error the real SDK returns.
func TestClassifyRows(t *testing.T) {
	one := transport.Message{Value: []byte("body")}
	two := []transport.Message{{Value: []byte("a")}, {Value: []byte("b")}}
	rows := []classifyRow{
		{name: "InternalError", faults: true, want: breaker.Failure,
			publish: withFault(sqstest.InternalError, one), check: code("InternalError")},
		{name: "ServiceUnavailable", faults: true, want: breaker.Failure,
			publish: withFault(sqstest.ServiceUnavailable, two...), check: code("ServiceUnavailable")},
		{name: "ThrottlingException", faults: true, want: breaker.Failure,
			publish: withFault(sqstest.ThrottlingException, one), check: code("ThrottlingException")},
		{name: "RequestThrottled", faults: true, want: breaker.Failure,
			publish: withFault(sqstest.RequestThrottled, one), check: as[*types.RequestThrottled]()},
		{name: "KmsThrottled", faults: true, want: breaker.Failure,
			publish: withFault(sqstest.KmsThrottled, two...), check: both(as[*types.KmsThrottled](), code("KMS.ThrottlingException"))},
		{name: "KmsAccessDenied", faults: true, want: breaker.Unusable,
			publish: withFault(sqstest.KmsAccessDenied, one), check: as[*types.KmsAccessDenied]()},
		{name: "KmsDisabled", faults: true, want: breaker.Unusable,
			publish: withFault(sqstest.KmsDisabled, one), check: as[*types.KmsDisabled]()},
		{name: "AccessDenied", faults: true, want: breaker.Unusable,
			publish: withFault(sqstest.AccessDenied, two...), check: code("AccessDenied")},
		{name: "InvalidParameterValue", faults: true, want: breaker.Rejected,
			publish: withFault(sqstest.InvalidParameterValue, one), check: code("InvalidParameterValue")},
		{name: "QueueDoesNotExist fault", faults: true, want: breaker.Unusable,
			publish: withFault(sqstest.QueueDoesNotExist, two...), check: as[*types.QueueDoesNotExist]()},
		{name: "InvalidMessageContents fault", faults: true, want: breaker.Rejected,
			publish: withFault(sqstest.InvalidMessageContents, one), check: as[*types.InvalidMessageContents]()},
		{name: "queue does not exist", want: breaker.Unusable,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				return publishTo(t, context.Background(), client(t, e.endpoint, nil), "absent"+e.suffix, one)
			},
			check: both(as[*types.QueueDoesNotExist](), code("AWS.SimpleQueueService.NonExistentQueue"))},
		{name: "message too long", want: breaker.Rejected,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				long := transport.Message{Value: []byte(strings.Repeat("x", 1<<20+1))}
				return publishTo(t, context.Background(), c, e.queue(t, c, "long", nil), long)
			},
			check: code("InvalidParameterValue")},
		{name: "invalid message contents", want: breaker.Rejected,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				return publishTo(t, context.Background(), c, e.queue(t, c, "contents", nil), transport.Message{Value: []byte("bell \a")})
			},
			check: as[*types.InvalidMessageContents]()},
		{name: "invalid message refused locally", want: breaker.Rejected,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				empty := transport.Message{Value: []byte("x"), Headers: []transport.Header{{Key: "k"}}}
				return publishTo(t, context.Background(), c, e.queue(t, c, "local", nil), empty)
			},
			check: both(is(brokersqs.ErrInvalidMessage), as[*brokersqs.InvalidMessageError]())},
		{name: "connection refused", want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				return publishTo(t, context.Background(), client(t, closedPort(t), nil), "refused", one)
			},
			check: is(syscall.ECONNREFUSED)},
		{name: "connection refused, SDK retryer off", want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, closedPort(t), nil, func(o *awssqs.Options) { o.Retryer = aws.NopRetryer{} })
				return publishTo(t, context.Background(), c, "refused", one)
			},
			check: both(is(syscall.ECONNREFUSED), as[*smithyhttp.RequestSendError]())},
		{name: "connection reset, SDK retryer off", want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, resettingPeer(t), nil, func(o *awssqs.Options) { o.Retryer = aws.NopRetryer{} })
				return publishTo(t, context.Background(), c, "reset", one)
			},
			check: is(syscall.ECONNRESET)},
		{name: "connection reset", want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				return publishTo(t, context.Background(), client(t, resettingPeer(t), nil), "reset", one)
			},
			check: is(syscall.ECONNRESET)},
		{name: "connection closed mid-request", faults: true, want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				q := e.queue(t, c, "closed", nil)
				e.srv.SetFault(q, sqstest.Hang)
				t.Cleanup(func() { _ = e.srv.AcceptConnections() })
				go whenHeld(t, e.srv, q, e.srv.RefuseConnections)
				return publishTo(t, context.Background(), c, e.srv.QueueURL(q), one)
			},
			check: as[*smithyhttp.RequestSendError]()},
		{name: "timeout the client set", faults: true, want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				// The queue is made with a client of its own: under the 200ms timeout a
				// loaded machine could fail the healthy CreateQueue too.
				q := e.queue(t, client(t, e.endpoint, nil), "timeout", nil)
				c := client(t, e.endpoint, &http.Client{Transport: &http.Transport{}, Timeout: 200 * time.Millisecond})
				e.srv.SetFault(q, sqstest.Hang)
				return publishTo(t, context.Background(), c, e.srv.QueueURL(q), two...)
			},
			check: is(context.DeadlineExceeded)},
		{name: "retry quota exhausted", faults: true, want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil, retries(3, 1))
				q := e.queue(t, c, "quota", nil)
				e.srv.SetFault(q, sqstest.InternalError)
				return publishTo(t, context.Background(), c, e.srv.QueueURL(q), one)
			},
			check: as[ratelimit.QuotaExceededError]()},
		{name: "attempts exhausted", faults: true, want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil, retries(2, 0))
				q := e.queue(t, c, "attempts", nil)
				e.srv.SetFault(q, sqstest.ServiceUnavailable)
				snap, err := publishTo(t, context.Background(), c, e.srv.QueueURL(q), two...)
				if n := e.srv.Requests(q, "SendMessageBatch"); n != 2 {
					t.Errorf("server saw %d attempts, want 2", n)
				}
				return snap, err
			},
			check: as[*retry.MaxAttemptsError]()},
		{name: "caller cancellation", faults: true, want: breaker.Neutral,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				q := e.queue(t, c, "cancel", nil)
				e.srv.SetFault(q, sqstest.Hang)
				ctx, cancel := context.WithCancel(context.Background())
				go whenHeld(t, e.srv, q, cancel)
				return publishTo(t, ctx, c, e.srv.QueueURL(q), one)
			},
			check: is(context.Canceled)},
		{name: "batch entry with SenderFault", faults: true, want: breaker.Rejected,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				q := e.queue(t, c, "sender", nil)
				e.srv.SetBatchEntryFault(q, failEntries(map[int]sqstest.Fault{1: sqstest.InvalidParameterValue}))
				return publishTo(t, context.Background(), c, e.srv.QueueURL(q), two...)
			},
			check: entry("InvalidParameterValue", true)},
		{name: "batch entry without SenderFault", faults: true, want: breaker.Failure,
			publish: func(t *testing.T, e *env) (breaker.Snapshot, error) {
				c := client(t, e.endpoint, nil)
				q := e.queue(t, c, "receiver", nil)
				e.srv.SetBatchEntryFault(q, failEntries(map[int]sqstest.Fault{0: sqstest.InternalError}))
				return publishTo(t, context.Background(), c, e.srv.QueueURL(q), two...)
			},
			check: entry("InternalError", false)},
	}
	for _, row := range rows {
		t.Run(row.name, func(t *testing.T) {
			e := newEnv(t)
			if row.faults {
				e.faults(t)
			}
			snap, err := row.publish(t, e)
			if err == nil {
				t.Fatal("publish succeeded; the row needs an error")
			}
			row.check(t, err)
			if got := brokersqs.Classify(err); got != row.want {
				t.Errorf("Classify(%v) = %v, want %v", err, got, row.want)
			}
			// The publisher completed its permit with the same outcome.
			switch row.want {
			case breaker.Failure:
				if snap.State != breaker.Open {
					t.Errorf("circuit %v after a Failure, want open", snap.State)
				}
			default:
				if snap.State != breaker.Closed || snap.Failures != 0 {
					t.Errorf("circuit %v with %d failures after a %v, want closed with none", snap.State, snap.Failures, row.want)
				}
			}
		})
	}
}

// The caller's deadline against a queue that does not answer: a verdict on the queue
// when the call started with the policy's MinCallBudget (default 100ms), none when it
// started with less. This test used to require Neutral for both, so a hung queue never
// opened the circuit of callers with deadlines.
func TestCallerDeadlineRule(t *testing.T) {
	for _, tc := range []struct {
		deadline     time.Duration
		wantFailures int
	}{
		{50 * time.Millisecond, 0},
		{300 * time.Millisecond, 1},
	} {
		t.Run(tc.deadline.String(), func(t *testing.T) {
			e := newEnv(t)
			srv := e.faults(t)
			c := client(t, e.endpoint, nil)
			q := e.queue(t, c, "deadline", nil)
			srv.SetFault(q, sqstest.Hang)
			ctx, cancel := context.WithTimeout(context.Background(), tc.deadline)
			defer cancel()
			snap, err := publishTo(t, ctx, c, q, transport.Message{Value: []byte("late")})
			if !errors.Is(err, context.DeadlineExceeded) {
				t.Fatalf("publish: %v, want the caller's deadline", err)
			}
			if snap.Failures != tc.wantFailures {
				t.Errorf("circuit %v with %d failures after the caller's deadline, want %d", snap.State, snap.Failures, tc.wantFailures)
			}
		})
	}
}

// whenHeld calls release once a SendMessage request to queue has reached srv,
// which holds it (sqstest.Hang). It runs on its own goroutine.
func whenHeld(t *testing.T, srv *sqstest.Server, queue string, release func()) {
	deadline := time.Now().Add(10 * time.Second)
	for srv.Requests(queue, "SendMessage") == 0 {
		if time.Now().After(deadline) {
			t.Error("gave up waiting for the request to reach the server")
			break
		}
		time.Sleep(time.Millisecond)
	}
	release()
}

// entry checks for a batch error whose only failure is an *EntryError.
func entry(code string, sender bool) func(*testing.T, error) {
	return func(t *testing.T, err error) {
		t.Helper()
		be, ok := errors.AsType[*transport.BatchError](err)
		if !ok || len(be.Failed) != 1 {
			t.Fatalf("error %v: want a batch error with one failed message", err)
		}
		ee, ok := errors.AsType[*brokersqs.EntryError](be.Failed[0].Err)
		if !ok || ee.Code != code || ee.SenderFault != sender {
			t.Fatalf("entry error %#v: want code %s, SenderFault %v", be.Failed[0].Err, code, sender)
		}
	}
}

// failEntries fails the batch entries at the given positions of every request.
func failEntries(faults map[int]sqstest.Fault) sqstest.EntryFaultFunc {
	return func(i int, _ string) (sqstest.Fault, bool) {
		f, ok := faults[i]
		return f, ok
	}
}

// closedPort returns an endpoint on a loopback port nothing listens on.
func closedPort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	return "http://" + addr
}

// resettingPeer returns an endpoint that reads each request and then resets
// the connection instead of answering.
func resettingPeer(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Go(func() {
		for {
			conn, err := l.Accept()
			if err != nil {
				return // the listener was closed
			}
			if req, err := http.ReadRequest(bufio.NewReader(conn)); err == nil {
				_, _ = io.Copy(io.Discard, req.Body)
			}
			_ = conn.(*net.TCPConn).SetLinger(0) // close with RST
			_ = conn.Close()
		}
	})
	t.Cleanup(func() {
		_ = l.Close()
		wg.Wait()
	})
	return "http://" + l.Addr().String()
}
