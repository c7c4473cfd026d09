package kafka_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	kafkago "github.com/segmentio/kafka-go"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
)

// MaxInFlight makes the circuit count admitted, uncompleted permits.
var tracked = breaker.Policy{FailureThreshold: 1000, BreakDuration: time.Minute, MaxInFlight: 1000}

// completions records what the application's own Completion sees.
type completions struct {
	mu   sync.Mutex
	data []any
	errs int
	more chan struct{}
}

func (c *completions) completion(msgs []kafkago.Message, err error) {
	c.mu.Lock()
	for _, m := range msgs {
		c.data = append(c.data, m.WriterData)
		if err != nil {
			c.errs++
		}
	}
	c.mu.Unlock()
	select {
	case c.more <- struct{}{}:
	default:
	}
}

// wait returns once n messages have been reported, failing after a generous bound.
func (c *completions) wait(t *testing.T, n int) {
	t.Helper()
	timeout := time.After(20 * time.Second)
	for {
		c.mu.Lock()
		got := len(c.data)
		c.mu.Unlock()
		if got >= n {
			return
		}
		select {
		case <-c.more:
		case <-timeout:
			t.Fatalf("%d of %d messages reported", got, n)
		}
	}
}

func asyncEnv(t *testing.T, tune func(*kafkago.Writer)) (*env, *completions) {
	seen := &completions{more: make(chan struct{}, 1)}
	e := newEnv(t, tracked, func(e *env) {
		e.w.Async = true
		e.w.Completion = seen.completion
		e.regOpts = append(e.regOpts, registry.WithCallCounts())
		if tune != nil {
			tune(e.w)
		}
	}, "orders")
	e.needKFake()
	return e, seen
}

func TestAsyncCompletesEachPermitOnce(t *testing.T) {
	e, seen := asyncEnv(t, nil)
	ctx := context.Background()
	for i := range 5 {
		if err := e.pub.Publish(ctx, e.dest(0), msg(2*i), msg(2*i+1)); err != nil {
			t.Fatal(err)
		}
	}
	seen.wait(t, 10)
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 0 {
		t.Fatalf("after 5 written calls: %d permits in flight, %d failures", s.InFlight, s.Failures)
	}

	answered := answerProduce(e.cluster, int16(kafkago.NotEnoughReplicas), true, nil)
	for i := range 3 {
		err := e.pub.WriteMessages(ctx,
			kafkago.Message{Topic: e.topics[0], Value: []byte("x"), WriterData: i},
			kafkago.Message{Topic: e.topics[0], Value: []byte("y"), WriterData: -i})
		if err != nil {
			t.Fatal(err)
		}
	}
	seen.wait(t, 16)
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 3 {
		t.Fatalf("after 3 failed calls (%d produce requests): %d permits in flight, %d failures; want 0 and one failure per call", answered.Load(), s.InFlight, s.Failures)
	}
	// The registry counted each asynchronous call once, when the writer reported it.
	if got, want := e.reg.Report()[0].Calls, (registry.CallCounts{Published: 5, Failed: 3}); got != want {
		t.Fatalf("call counts %+v, want %+v", got, want)
	}
	seen.mu.Lock()
	data, errs := seen.data[10:], seen.errs
	seen.mu.Unlock()
	sum := 0
	for _, d := range data {
		v, ok := d.(int)
		if !ok {
			t.Fatalf("the application's Completion saw WriterData %T, not its own", d)
		}
		sum += v*v + 1
	}
	if errs != 6 || sum != 2*(0+1+4)+6 {
		t.Fatalf("the application's Completion saw %d errors and WriterData %v", errs, data)
	}

	// A write the writer refuses before queueing completes its permit at once.
	if err := e.pub.WriteMessages(ctx, kafkago.Message{Topic: "absent", Value: []byte("x")}); !errors.Is(err, kafkago.UnknownTopicOrPartition) {
		t.Fatalf("unknown topic: %v", err)
	}
	c, _ := e.reg.Circuit(e.dest(0))
	absent, _ := e.reg.Circuit(transportDest("absent"))
	if c.Snapshot().InFlight != 0 || absent.Snapshot().InFlight != 0 || absent.Snapshot().Failures != 0 {
		t.Fatalf("refused write left %d permits in flight", absent.Snapshot().InFlight)
	}
}

// The broker holds every request: Close gives up within its context, completes the
// pending permits as Neutral, and the late reports change nothing.
func TestAsyncCloseWithBrokerDownIsBounded(t *testing.T) {
	e, seen := asyncEnv(t, func(w *kafkago.Writer) {
		w.BatchTimeout = time.Hour // the messages stay queued until Close
		w.MaxAttempts = 10
		w.WriteTimeout = 2 * time.Second // so kafka-go alone would take 20s or more
		w.WriteBackoffMin, w.WriteBackoffMax = time.Millisecond, 2*time.Millisecond
	})
	hangProduce(e.cluster, true, nil)
	for i := range 3 {
		if err := e.pub.Publish(context.Background(), e.dest(0), msg(i)); err != nil {
			t.Fatal(err)
		}
	}
	if n := e.circuit(0).InFlight; n != 3 {
		t.Fatalf("%d permits in flight, want 3", n)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	closed := make(chan error, 1)
	go func() { closed <- e.pub.Close(ctx) }()
	select {
	case err := <-closed:
		if !errors.Is(err, kafka.ErrStillFlushing) || !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("Close: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close did not return within 10s although its context ended after 200ms")
	}
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 0 {
		t.Fatalf("after Close gave up: %d permits in flight, %d failures; want 0, 0", s.InFlight, s.Failures)
	}
	if err := e.pub.Publish(context.Background(), e.dest(0), msg(9)); !errors.Is(err, kafka.ErrClosed) {
		t.Fatalf("publish after Close: %v", err)
	}

	e.cluster.Close() // kafka-go's remaining attempts now fail fast
	select {
	case <-e.pub.Flushed():
	case <-time.After(30 * time.Second):
		t.Fatal("the writer's Close never returned")
	}
	seen.wait(t, 3)
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 0 {
		t.Fatalf("after the late reports: %d permits in flight, %d failures; want 0, 0", s.InFlight, s.Failures)
	}
	seen.mu.Lock()
	defer seen.mu.Unlock()
	if seen.errs != 3 {
		t.Fatalf("the application's Completion saw %d failed messages, want 3", seen.errs)
	}
	if err := e.pub.Close(context.Background()); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// panicBalancer panics the first time the writer asks it for a partition.
type panicBalancer struct{ armed bool }

func (b *panicBalancer) Balance(_ kafkago.Message, partitions ...int) int {
	if b.armed {
		b.armed = false
		panic("balancer: boom")
	}
	return partitions[0]
}

// A writer that panics while taking an asynchronous write (here the application's
// Balancer) completes that call's permit as Neutral; the panic goes on to the caller.
func TestAsyncPanicCompletesThePermit(t *testing.T) {
	bal := &panicBalancer{}
	e, seen := asyncEnv(t, func(w *kafkago.Writer) { w.Balancer = bal })
	bal.armed = true
	func() {
		defer func() {
			if r := recover(); r != "balancer: boom" {
				t.Fatalf("recovered %v, want the balancer's panic", r)
			}
		}()
		_ = e.pub.Publish(context.Background(), e.dest(0), msg(0))
		t.Fatal("the panic was swallowed")
	}()
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 0 {
		t.Fatalf("after the panic: %d permits in flight, %d failures; want 0, 0", s.InFlight, s.Failures)
	}
	if err := e.pub.Publish(context.Background(), e.dest(0), msg(1)); err != nil {
		t.Fatal(err)
	}
	seen.wait(t, 1)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := e.pub.Close(ctx); err != nil {
		t.Fatalf("Close after the panic: %v", err) // nothing of the panicked call is pending
	}
}

// topicPanicBalancer panics for the messages of one topic, every time.
type topicPanicBalancer struct{ topic string }

func (b topicPanicBalancer) Balance(m kafkago.Message, partitions ...int) int {
	if m.Topic == b.topic {
		panic("balancer: boom on " + b.topic)
	}
	return partitions[0]
}

// A synchronous write to several topics writes the further topics in goroutines of
// their own; a panic in one of them reaches the caller (it does not crash the process),
// and every permit of the call is completed.
func TestMultiTopicPanicReachesTheCaller(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second, MaxInFlight: 4}, nil, "calm", "boom")
	e.w.Balancer = topicPanicBalancer{topic: e.topics[1]}
	func() {
		defer func() {
			if r := recover(); r != "balancer: boom on "+e.topics[1] {
				t.Fatalf("recovered %v, want the balancer's panic", r)
			}
		}()
		_ = e.pub.WriteMessages(context.Background(),
			kafkago.Message{Topic: e.topics[0], Value: []byte("a")},
			kafkago.Message{Topic: e.topics[1], Value: []byte("b")})
		t.Fatal("the panic was swallowed")
	}()
	for i := range 2 {
		if s := e.circuit(i); s.InFlight != 0 || s.Failures != 0 {
			t.Fatalf("%s after the panic: %d in flight, %d failures; want 0, 0", e.topics[i], s.InFlight, s.Failures)
		}
	}
}
