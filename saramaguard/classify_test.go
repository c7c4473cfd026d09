package saramaguard_test

import (
	"context"
	"errors"
	"net"
	"testing"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/saramaguard"
)

// A fault is one classification row: it arms the cluster for the next produce and
// returns the context to send with.
type fault struct {
	name    string
	arm     func(e *env) (context.Context, context.CancelFunc)
	is      error // what sarama reports; nil: a network timeout
	raw     breaker.Outcome
	counted breaker.Outcome // what the guarded call counts, when the caller's context decides
	large   bool
	check   func(error) bool // instead of is
}

func answer(code sarama.KError) func(e *env) (context.Context, context.CancelFunc) {
	return func(e *env) (context.Context, context.CancelFunc) {
		kfakeproduce.Answer(e.cluster, int16(code), false, nil)
		return context.WithCancel(context.Background())
	}
}

func hang(e *env) (context.Context, context.CancelFunc) {
	kfakeproduce.Hang(e.cluster, false, nil)
	return context.WithCancel(context.Background())
}

// The rows of the kafka-go adapter's table, produced by the real SyncProducer
// against kfake. sarama's SyncProducer takes no context: a caller that gives up
// still waits for sarama's own timeout, and the registry's rule for an ended context
// decides how the call counts.
var faults = []fault{
	{name: "not leader", arm: answer(sarama.ErrNotLeaderForPartition), is: sarama.ErrNotLeaderForPartition, raw: breaker.Failure},
	{name: "request timed out", arm: answer(sarama.ErrRequestTimedOut), is: sarama.ErrRequestTimedOut, raw: breaker.Failure},
	{name: "no leader", arm: answer(sarama.ErrLeaderNotAvailable), is: sarama.ErrLeaderNotAvailable, raw: breaker.Failure},
	{name: "not enough replicas", arm: answer(sarama.ErrNotEnoughReplicas), is: sarama.ErrNotEnoughReplicas, raw: breaker.Failure},
	{name: "message too large (broker)", arm: answer(sarama.ErrMessageSizeTooLarge), is: sarama.ErrMessageSizeTooLarge, raw: breaker.Rejected},
	{name: "authorization", arm: answer(sarama.ErrTopicAuthorizationFailed), is: sarama.ErrTopicAuthorizationFailed, raw: breaker.Unusable},
	// sarama refuses it before sending, as a configuration error.
	{name: "message too large (client)", large: true, raw: breaker.Neutral, check: func(err error) bool {
		var ce sarama.ConfigurationError
		return errors.As(err, &ce)
	},
		arm: func(*env) (context.Context, context.CancelFunc) { return context.WithCancel(context.Background()) }},
	{name: "hung broker, sarama's read timeout", arm: hang, raw: breaker.Failure},
	{name: "hung broker, caller cancels", raw: breaker.Failure, counted: breaker.Neutral,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			ctx, cancel := context.WithCancel(context.Background())
			kfakeproduce.Hang(e.cluster, false, cancel)
			return ctx, cancel
		}},
	// The registry's deadline rule: a deadline shorter than the MinCallBudget says
	// nothing; one that left the broker its budget and passed during the call is a
	// Failure (sarama answers only at its own read timeout, after it).
	{name: "hung broker, short caller deadline", raw: breaker.Failure, counted: breaker.Neutral,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			kfakeproduce.Hang(e.cluster, false, nil)
			return context.WithTimeout(context.Background(), registry.DefaultMinCallBudget/2)
		}},
	{name: "hung broker, caller deadline with its budget", raw: breaker.Failure, counted: breaker.Failure,
		arm: func(e *env) (context.Context, context.CancelFunc) {
			kfakeproduce.Hang(e.cluster, false, nil)
			return context.WithTimeout(context.Background(), 3*registry.DefaultMinCallBudget)
		}},
}

func TestClassifyRows(t *testing.T) {
	for _, f := range faults {
		t.Run(f.name, func(t *testing.T) {
			t.Parallel() // each row has its own cluster; the hung ones wait out sarama's timeouts side by side
			e := newEnv(t, counting, "orders")
			raw, guarded := e.sync()
			m := e.message(0, 1)
			if f.large {
				m.Value = sarama.ByteEncoder(make([]byte, 128<<10))
			}
			_, cancel := f.arm(e) // the raw producer takes no context; arming sets the fault
			_, _, err := raw.SendMessage(m)
			cancel()
			checkErr(t, "raw", f, err)
			if got := saramaguard.Classify(err); got != f.raw {
				t.Errorf("Classify(%v) = %v, want %v", err, got, f.raw)
			}
			want := f.raw
			if f.counted != 0 {
				want = f.counted
			}
			for _, path := range []string{"SendMessage", "Publish"} {
				before := e.circuit(0).Failures
				ctx, cancel := f.arm(e)
				if path == "SendMessage" {
					m := e.message(0, 2)
					if f.large {
						m.Value = sarama.ByteEncoder(make([]byte, 128<<10))
					}
					_, _, err = guarded.SendMessage(ctx, m)
				} else {
					pm := msg(3)
					if f.large {
						pm.Value = make([]byte, 128<<10)
					}
					err = guarded.Publish(ctx, e.dest(0), pm)
				}
				cancel()
				checkErr(t, path, f, err)
				s := e.circuit(0)
				if counted, wantCounted := s.Failures-before, map[bool]int{true: 1}[want == breaker.Failure]; counted != wantCounted {
					t.Errorf("%s: the circuit counted %d failures, want %d (err %v)", path, counted, wantCounted, err)
				}
				if s.InFlight != 0 {
					t.Errorf("%s: %d permits in flight", path, s.InFlight)
				}
			}
		})
	}
}

func checkErr(t *testing.T, path string, f fault, err error) {
	t.Helper()
	if f.check != nil {
		if !f.check(err) {
			t.Errorf("%s: unexpected %#v", path, err)
		}
		return
	}
	if f.is != nil {
		if !errors.Is(err, f.is) {
			t.Errorf("%s: %v, want %v", path, err, f.is)
		}
		return
	}
	var ne net.Error
	if !errors.As(err, &ne) || !ne.Timeout() {
		t.Errorf("%s: %#v, want a network timeout", path, err)
	}
}

// With the cluster gone sarama runs out of brokers: a Failure. A closed producer is
// the application's: Neutral, and no panic.
func TestClassifyBrokerGoneAndClosed(t *testing.T) {
	e := newEnv(t, counting, "orders")
	raw, guarded := e.sync()
	ctx := context.Background()
	if err := guarded.Publish(ctx, e.dest(0), msg(0)); err != nil {
		t.Fatal(err)
	}
	e.cluster.Close()
	_, _, err := raw.SendMessage(e.message(0, 1))
	if err == nil || saramaguard.Classify(err) != breaker.Failure {
		t.Fatalf("broker gone: sarama returned %v, classified %v", err, saramaguard.Classify(err))
	}
	before := e.circuit(0).Failures
	if err := guarded.Publish(ctx, e.dest(0), msg(2)); err == nil || e.circuit(0).Failures != before+1 {
		t.Errorf("broker gone via Publish: %v, failures %d -> %d", err, before, e.circuit(0).Failures)
	}
	if err := guarded.Close(); err != nil {
		t.Fatal(err)
	}
	before = e.circuit(0).Failures
	if _, _, err := guarded.SendMessage(ctx, e.message(0, 3)); !errors.Is(err, saramaguard.ErrClosed) || e.circuit(0).Failures != before {
		t.Errorf("closed producer: %v", err)
	}
	if err := guarded.SendMessages(ctx, []*sarama.ProducerMessage{e.message(0, 4)}); !errors.Is(err, saramaguard.ErrClosed) || e.circuit(0).Failures != before {
		t.Errorf("closed producer, SendMessages: %v", err)
	}
	if s := e.circuit(0); s.InFlight != 0 {
		t.Errorf("%d permits in flight", s.InFlight)
	}
}

// A publish of no messages is refused before a permit is taken.
func TestEmptyPublishRefused(t *testing.T) {
	e := newEnv(t, counting, "orders")
	_, p := e.sync()
	if err := p.Publish(context.Background(), e.dest(0)); !errors.Is(err, registry.ErrNoMessages) {
		t.Fatalf("empty publish: %v", err)
	}
}

// A partition whose metadata names no live leader (an election): sarama fails the
// message with ErrLeaderNotAvailable once its metadata retries run out, a Failure.
func TestClassifyPartitionWithoutLeader(t *testing.T) {
	e := newEnv(t, counting, "orders")
	kfakeproduce.NoLeader(e.cluster, e.topics[0])
	raw, p := e.sync() // new producers: they must ask for the metadata
	_, _, err := raw.SendMessage(e.message(0, 1))
	if !errors.Is(err, sarama.ErrLeaderNotAvailable) || saramaguard.Classify(err) != breaker.Failure {
		t.Fatalf("no leader: sarama returned %v, classified %v", err, saramaguard.Classify(err))
	}
	if err := p.Publish(context.Background(), e.dest(0), msg(2)); !errors.Is(err, sarama.ErrLeaderNotAvailable) || e.circuit(0).Failures != 1 {
		t.Errorf("no leader via Publish: %v, %d failures", err, e.circuit(0).Failures)
	}
}
