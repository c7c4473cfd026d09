package kgoguard_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/kgoguard"
	"github.com/brokerguard/brokerguard/registry"
)

// A fault is one classification row: it arms the cluster for the next produce and
// returns the context to produce with.
type fault struct {
	name    string
	arm     func(e *env) (context.Context, context.CancelFunc)
	is      error // what franz-go reports
	want    breaker.Outcome
	counted breaker.Outcome // what the guarded call counts, when the registry's deadline rule decides
	large   bool            // produce a record too large for the client
}

func answer(code int16) func(e *env) (context.Context, context.CancelFunc) {
	return func(e *env) (context.Context, context.CancelFunc) {
		kfakeproduce.Answer(e.cluster, code, false, nil)
		return context.WithCancel(context.Background())
	}
}

// The rows of the kafka-go adapter's table, produced by the real client against
// kfake: once raw, whose error Classify must judge, once through Publish and once
// through Produce, whose circuits must count exactly the Failures.
var faults = []fault{
	{name: "not leader", arm: answer(kafkacode.NotLeaderForPartition), is: kerr.NotLeaderForPartition, want: breaker.Failure},
	// franz-go does not know whether a timed-out request was written, so it retries
	// past RecordRetries, then fails the record with its retry limit.
	{name: "request timed out", arm: answer(kafkacode.RequestTimedOut), is: kgo.ErrRecordRetries, want: breaker.Failure},
	{name: "no leader", arm: answer(kafkacode.LeaderNotAvailable), is: kerr.LeaderNotAvailable, want: breaker.Failure},
	{name: "not enough replicas", arm: answer(kafkacode.NotEnoughReplicas), is: kerr.NotEnoughReplicas, want: breaker.Failure},
	{name: "message too large (broker)", arm: answer(kerr.MessageTooLarge.Code), is: kerr.MessageTooLarge, want: breaker.Rejected},
	{name: "authorization", arm: answer(kerr.TopicAuthorizationFailed.Code), is: kerr.TopicAuthorizationFailed, want: breaker.Unusable},
	{name: "message too large (client)", large: true, is: kerr.MessageTooLarge, want: breaker.Rejected,
		arm: func(*env) (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	{name: "caller cancel", is: context.Canceled, want: breaker.Neutral,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			kfakeproduce.Hang(e.cluster, false, cancel)
			return ctx, cancel
		}},
	// The registry's deadline rule: a deadline shorter than the MinCallBudget says
	// nothing; one that left the broker its budget and ended the call is a Failure.
	{name: "hung broker, short caller deadline", is: context.DeadlineExceeded, want: breaker.Neutral,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			kfakeproduce.Hang(e.cluster, false, nil)
			return context.WithTimeout(context.Background(), registry.DefaultMinCallBudget/2)
		}},
	{name: "hung broker, caller deadline with its budget", is: context.DeadlineExceeded, want: breaker.Neutral, counted: breaker.Failure,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			kfakeproduce.Hang(e.cluster, false, nil)
			return context.WithTimeout(context.Background(), 3*registry.DefaultMinCallBudget)
		}},
	// The request times out on the connection; the retry limit ends the record.
	{name: "hung broker, client's request timeout", is: kgo.ErrRecordRetries, want: breaker.Failure,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			kfakeproduce.Hang(e.cluster, false, nil)
			return context.WithCancel(context.Background())
		}},
}

func TestClassifyRows(t *testing.T) {
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // each row has its own cluster; the hung ones wait out their timeouts side by side
			checkRow(t, f)
		})
	}
}

// checkRow produces f's fault on a cluster of its own (a hung request holds its
// connection).
func checkRow(t *testing.T, f fault) {
	// The request timeout bounds the hung-broker row that has no caller deadline.
	e := newEnv(t, counting, []string{"orders"}, kgo.ProduceRequestTimeout(600*time.Millisecond),
		kgo.RequestTimeoutOverhead(400*time.Millisecond), kgo.ProducerBatchMaxBytes(64<<10))
	record := func(f fault) *kgo.Record {
		r := e.record(0, 1)
		if f.large {
			r.Value = make([]byte, 128<<10)
		}
		return r
	}
	{
		// Raw.
		ctx, cancel := f.arm(e)
		raw := e.cl.ProduceSync(ctx, record(f)).FirstErr()
		cancel()
		if !errors.Is(raw, f.is) {
			t.Errorf("%s: franz-go returned %v, want %v", f.name, raw, f.is)
		}
		if got := kgoguard.Classify(raw); got != f.want {
			t.Errorf("%s: Classify(%v) = %v, want %v", f.name, raw, got, f.want)
		}
		// Publish, then Produce with a promise: each counts once when a Failure.
		counted := f.want
		if f.counted != 0 {
			counted = f.counted
		}
		wantCounted := map[bool]int{true: 1}[counted == breaker.Failure]
		for _, path := range []string{"Publish", "Produce"} {
			before := e.circuit(0).Failures
			ctx, cancel := f.arm(e)
			var err error
			if path == "Publish" {
				m := msg(1)
				if f.large {
					m.Value = make([]byte, 128<<10)
				}
				err = e.p.Publish(ctx, e.dest(0), m)
			} else {
				done := make(chan error, 1)
				e.p.Produce(ctx, record(f), func(_ *kgo.Record, err error) { done <- err })
				err = <-done
			}
			cancel()
			if !errors.Is(err, f.is) {
				t.Errorf("%s via %s: %v, want %v", f.name, path, err, f.is)
			}
			s := e.circuit(0)
			if counted := s.Failures - before; counted != wantCounted {
				t.Errorf("%s via %s: the circuit counted %d failures, want %d (err %v)", f.name, path, counted, wantCounted, err)
			}
			if s.InFlight != 0 {
				t.Errorf("%s via %s: %d permits still in flight", f.name, path, s.InFlight)
			}
		}
	}
}

// With the cluster gone, franz-go fails the record with a connection error (or its
// retry limit): a Failure. Closing the client is the application's: Neutral.
func TestClassifyBrokerGoneAndClosedClient(t *testing.T) {
	e := newEnv(t, counting, []string{"orders"})
	ctx := context.Background()
	if err := e.p.Publish(ctx, e.dest(0), msg(0)); err != nil {
		t.Fatal(err)
	}
	e.cluster.Close()
	raw := e.cl.ProduceSync(ctx, e.record(0, 1)).FirstErr()
	if raw == nil || kgoguard.Classify(raw) != breaker.Failure {
		t.Fatalf("broker gone: franz-go returned %v, classified %v", raw, kgoguard.Classify(raw))
	}
	before := e.circuit(0).Failures
	if err := e.p.Publish(ctx, e.dest(0), msg(2)); err == nil || e.circuit(0).Failures != before+1 {
		t.Errorf("broker gone via Publish: %v, failures %d -> %d", err, before, e.circuit(0).Failures)
	}

	e.cl.Close()
	before = e.circuit(0).Failures
	raw = e.cl.ProduceSync(ctx, e.record(0, 3)).FirstErr()
	if !errors.Is(raw, kgo.ErrClientClosed) || kgoguard.Classify(raw) != breaker.Neutral {
		t.Fatalf("closed client: %v classified %v", raw, kgoguard.Classify(raw))
	}
	if err := e.p.Publish(ctx, e.dest(0), msg(4)); !errors.Is(err, kgo.ErrClientClosed) || e.circuit(0).Failures != before {
		t.Errorf("closed client via Publish: %v, failures %d -> %d", err, before, e.circuit(0).Failures)
	}
	if s := e.circuit(0); s.InFlight != 0 {
		t.Errorf("%d permits still in flight", s.InFlight)
	}
}

// A publish of no messages is refused before a permit is taken: it would tell the
// circuit nothing, yet count as a Success.
func TestEmptyPublishRefused(t *testing.T) {
	e := newEnv(t, counting, []string{"orders"})
	if err := e.p.Publish(context.Background(), e.dest(0)); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("empty publish: %v", err)
	}
}

// A partition whose metadata names no live leader (an election): franz-go sends the
// record to a seed broker, which (not being the leader) refuses it; the record fails
// once its retries run out, a Failure.
func TestClassifyPartitionWithoutLeader(t *testing.T) {
	e := newEnv(t, counting, []string{"orders"})
	kfakeproduce.NoLeader(e.cluster, e.topics[0])
	kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, nil)
	fresh := func() *kgo.Client { // one that must ask for the metadata
		return e.client(kgo.RecordDeliveryTimeout(time.Second))
	}
	raw := fresh().ProduceSync(context.Background(), e.record(0, 1)).FirstErr()
	if raw == nil || kgoguard.Classify(raw) != breaker.Failure {
		t.Fatalf("no leader: franz-go returned %v, classified %v", raw, kgoguard.Classify(raw))
	}
	p, err := kgoguard.New(fresh(), e.reg)
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Publish(context.Background(), e.dest(0), msg(2)); err == nil || e.circuit(0).Failures != 1 {
		t.Errorf("no leader via Publish: %v, %d failures", err, e.circuit(0).Failures)
	}
}
