package kafka_test

import (
	"context"
	"errors"
	"net"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"
)

// The broker stops: the topic's circuit opens at the threshold and later calls are
// rejected without the writer sending or dialing anything. The broker comes back and
// the break passes: one probe goes through and closes the circuit.
func TestBrokerStopOpensAndOneProbeCloses(t *testing.T) {
	var mu sync.Mutex
	var transitions []string
	observe := registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) {
		if _, ok := registry.PartitionOfTransition(tr); ok {
			return // the topic's one partition isolated and healed beside its circuit
		}
		mu.Lock()
		defer mu.Unlock()
		transitions = append(transitions, tr.To.String())
	})
	e := newEnv(t, policy, func(e *env) { e.regOpts = append(e.regOpts, observe) }, "orders")
	e.needKFake()
	ctx := context.Background()
	if err := e.pub.Publish(ctx, e.dest(0), msg(0)); err != nil {
		t.Fatal(err)
	}
	_, port, _ := net.SplitHostPort(e.brokers[0])
	e.cluster.Close()

	for i := range policy.FailureThreshold {
		err := e.pub.Publish(ctx, e.dest(0), msg(1))
		if err == nil || errors.Is(err, breaker.ErrOpen) {
			t.Fatalf("call %d with the broker stopped: %v", i, err)
		}
		if want := map[bool]breaker.State{true: breaker.Open}[i == policy.FailureThreshold-1]; e.circuit(0).State != want {
			t.Fatalf("after %d failures the circuit is %v, want %v", i+1, e.circuit(0).State, want)
		}
	}

	e.w.Stats() // Stats resets the writer's counters
	dials := e.dials.Load()
	for range 100 {
		err := e.pub.Publish(ctx, e.dest(0), msg(2))
		var rej *registry.RejectedError
		if !errors.Is(err, breaker.ErrOpen) || !errors.As(err, &rej) || rej.Destination != e.dest(0) {
			t.Fatalf("open circuit: %v", err)
		}
	}
	if s := e.w.Stats(); s.Writes != 0 || s.Messages != 0 || s.Dials != 0 || e.dials.Load() != dials {
		t.Fatalf("rejected calls reached the writer: %d writes, %d messages, %d dials", s.Writes, s.Messages, e.dials.Load()-dials)
	}

	p, _ := strconv.Atoi(port)
	back := harness.KFake(t, kfake.Ports(p), kfake.SeedTopics(1, e.topics...))
	produced := countProduce(back)
	if err := e.pub.Publish(ctx, e.dest(0), msg(3)); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("broker back, break not over: %v", err)
	}
	e.clock.Advance(policy.BreakDuration)
	if err := e.pub.Publish(ctx, e.dest(0), msg(4)); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if n := produced.get(e.topics[0]); n != 1 {
		t.Fatalf("%d produce requests reached the broker, want the one probe", n)
	}
	mu.Lock()
	got := transitions
	mu.Unlock()
	if len(got) != 3 || got[0] != "open" || got[1] != "half-open" || got[2] != "closed" {
		t.Fatalf("transitions %v, want open, half-open, closed", got)
	}
	if s := e.circuit(0); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("after the probe: %+v", s)
	}
	if recs := harness.ReadTopic(t, []string{back.ListenAddrs()[0]}, e.topics[0], 1); string(recs[0].Value) != "v4" {
		t.Fatalf("the probe wrote %q", recs[0].Value)
	}
}

// A caller that gives up in the middle of a write leaves the failure count as it was.
func TestCallerCancelLeavesFailureCount(t *testing.T) {
	e := newEnv(t, policy, nil, "orders")
	e.needKFake()
	ctx := context.Background()
	answerProduce(e.cluster, 5, false, nil) // LeaderNotAvailable: one failure
	if err := e.pub.Publish(ctx, e.dest(0), msg(0)); err == nil {
		t.Fatal("the broker's error was lost")
	}
	if n := e.circuit(0).Failures; n != 1 {
		t.Fatalf("%d failures, want 1", n)
	}
	for range policy.FailureThreshold {
		cctx, cancel := context.WithCancel(ctx)
		hangProduce(e.cluster, false, cancel) // cancel once the broker holds the request
		err := e.pub.Publish(cctx, e.dest(0), msg(1))
		cancel()
		if !errors.Is(err, context.Canceled) {
			t.Fatalf("cancelled call: %v", err)
		}
	}
	if s := e.circuit(0); s.Failures != 1 || s.State != breaker.Closed {
		t.Fatalf("after cancelled calls: %d failures, %v; want 1, closed", s.Failures, s.State)
	}
}

// With the writer's default BatchTimeout a synchronous write waits up to a second for
// its batch before the broker sees it. Callers with 300ms deadlines on a healthy broker
// used to count each such wait as a broker that did not answer, and opened the circuit
// in three calls; the wait is the writer's, so the deadlines are no verdict.
func TestBatchWaitIsNotABrokerTimeout(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Hour},
		func(e *env) { e.w.BatchTimeout = 0 }, "batched")
	d := transport.Destination{Broker: kafka.Broker, Name: e.topics[0]}
	timedOut := 0
	for i := range 3 { // the first call's batch goes out after 1s: a later call may make it
		ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
		err := e.pub.Publish(ctx, d, transport.Message{Value: []byte("x")})
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			timedOut++
		case err != nil:
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if timedOut == 0 {
		t.Fatal("no call waited out its deadline: the writer's batch wait was not exercised")
	}
	if s := e.reg.Snapshots()[d]; s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("%d calls ended by their deadline in the writer's batch wait counted against a healthy broker: %+v", timedOut, s)
	}
}

// A first hour with the library: the guarded kafka.Publisher guarded again by
// its own registry, an outage, then a healthy broker. Guarding twice used to hold
// the only probe slot in the outer call and refuse the inner one for good (0
// published, circuit half-open); Guard now hands the publisher back as it is, so the
// circuit closes on the first probe and every later publish goes through.
func TestGuardedPublisherGuardedAgainRecovers(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Second}, nil, "guardtwice")
	e.needKFake()
	pub := e.reg.Guard(e.pub, kafka.Classify)
	var down atomic.Bool
	down.Store(true)
	answerProduce(e.cluster, int16(kafkago.NotEnoughReplicas), true, func(string) bool { return down.Load() })
	ctx := context.Background()
	d := e.dest(0)
	for range 2 {
		if err := pub.Publish(ctx, d, msg(1)); err == nil {
			t.Fatal("a publish during the outage succeeded")
		}
	}
	if err := pub.Publish(ctx, d, msg(1)); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after the outage: %v; want the circuit open", err)
	}
	down.Store(false)
	e.clock.Advance(2 * time.Second)
	published := 0
	for i := range 20 {
		if err := pub.Publish(ctx, d, msg(i)); err == nil {
			published++
		}
	}
	if s := e.circuit(0); published != 20 || s.State != breaker.Closed {
		t.Fatalf("healthy broker after the break: %d of 20 published, circuit %v", published, s.State)
	}
}
