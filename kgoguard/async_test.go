package kgoguard_test

import (
	"context"
	"errors"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/kgoguard"
)

// A failing topic opens its own circuit only: its records are refused without
// reaching the broker, the other topic's are produced, in the same ProduceSync.
func TestSplitByTopic(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}, []string{"bad", "good"})
	answered := kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, func(topic string) bool { return topic == e.topics[0] })
	ctx := context.Background()
	for i := range 2 {
		if err := e.p.Publish(ctx, e.dest(0), msg(i)); !errors.Is(err, kerr.NotLeaderForPartition) {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	if e.circuit(0).State != breaker.Open {
		t.Fatalf("bad topic's circuit is %v", e.circuit(0).State)
	}
	sent := answered.Load()
	res := e.p.ProduceSync(ctx, e.record(0, 1), e.record(1, 2), e.record(0, 3), e.record(1, 4))
	if len(res) != 4 {
		t.Fatalf("%d results", len(res))
	}
	for _, r := range res {
		if r.Record.Topic == e.topics[0] {
			if !errors.Is(r.Err, breaker.ErrOpen) {
				t.Errorf("bad topic's record: %v, want the open circuit", r.Err)
			}
		} else if r.Err != nil {
			t.Errorf("good topic's record: %v", r.Err)
		}
	}
	if answered.Load() != sent {
		t.Errorf("the broker saw %d produce requests for the open topic", answered.Load()-sent)
	}
	if s := e.circuit(1); s.State != breaker.Closed || s.Failures != 0 {
		t.Errorf("good topic's circuit: %+v", s)
	}
	// Produce refuses through the promise, before returning.
	var got error
	e.p.Produce(ctx, e.record(0, 5), func(_ *kgo.Record, err error) { got = err })
	if !errors.Is(got, breaker.ErrOpen) {
		t.Errorf("Produce to the open topic: promise got %v", got)
	}
}

// Many goroutines produce asynchronously to a failing and a healthy topic, some with
// contexts they cancel: every promise comes once, every permit is completed once,
// and the failing topic counts exactly the Failures its promises reported. The
// healthy topic has a client of its own, as the fault answers whole requests.
func TestAsyncExactlyOnce(t *testing.T) {
	e := newEnv(t, counting, []string{"bad", "good"})
	goodCl := e.client()
	good, err := kgoguard.New(goodCl, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	producers := []*kgoguard.Producer{e.p, good}
	kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, func(topic string) bool { return topic == e.topics[0] })
	const workers, each = 8, 50
	var promises, failures [2]atomic.Int64
	var wg sync.WaitGroup
	cancels := make(chan context.CancelFunc, workers*each)
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				topic := (w + i) % 2
				ctx, cancel := context.WithCancel(context.Background())
				if i%10 == 0 {
					cancel() // refused before the client: the promise still comes
				}
				producers[topic].Produce(ctx, e.record(topic, i), func(_ *kgo.Record, err error) {
					promises[topic].Add(1)
					if kgoguard.Classify(err) == breaker.Failure {
						failures[topic].Add(1)
					}
				})
				cancels <- cancel // a record's context must live until its promise
			}
		})
	}
	wg.Wait()
	for _, cl := range []*kgo.Client{e.cl, goodCl} {
		if err := cl.Flush(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
	close(cancels)
	for cancel := range cancels {
		cancel()
	}
	for i := range 2 {
		s := e.circuit(i)
		if n := promises[i].Load(); n != workers*each/2 {
			t.Errorf("topic %d: %d promises, want %d", i, n, workers*each/2)
		}
		if s.InFlight != 0 {
			t.Errorf("topic %d: %d permits still in flight", i, s.InFlight)
		}
		if int64(s.Failures) != failures[i].Load() {
			t.Errorf("topic %d: the circuit counted %d failures, the promises reported %d", i, s.Failures, failures[i].Load())
		}
	}
	if failures[0].Load() == 0 || failures[1].Load() != 0 {
		t.Errorf("failures: bad %d, good %d", failures[0].Load(), failures[1].Load())
	}
	// The registry counted every call once, as the circuit judged it (for telemetry).
	for _, r := range e.reg.Report() {
		if c := r.Calls; c.Total() != workers*each/2 || c.Failed != uint64(r.Snapshot.Failures) {
			t.Errorf("%s: call counts %+v for %d calls, %d failures", r.Destination, c, workers*each/2, r.Snapshot.Failures)
		}
	}
}

// Records the broker holds when the client closes are failed with ErrClientClosed:
// their permits complete, as Neutral.
func TestCloseCompletesPending(t *testing.T) {
	e := newEnv(t, counting, []string{"orders"})
	kfakeproduce.Hang(e.cluster, true, nil)
	const n = 20
	var got sync.WaitGroup
	got.Add(n)
	var closed atomic.Int64
	for i := range n {
		e.p.Produce(context.Background(), e.record(0, i), func(_ *kgo.Record, err error) {
			if errors.Is(err, kgo.ErrClientClosed) {
				closed.Add(1)
			}
			got.Done()
		})
	}
	if s := e.circuit(0); s.InFlight != n {
		t.Fatalf("%d permits in flight before Close, want %d", s.InFlight, n)
	}
	e.cl.Close()
	got.Wait()
	if s := e.circuit(0); s.InFlight != 0 || s.Failures != 0 || closed.Load() != n {
		t.Errorf("after Close: %d in flight, %d failures, %d of %d promises saw ErrClientClosed", s.InFlight, s.Failures, closed.Load(), n)
	}
}

// A classifier that panics in a ProduceSync of several topics leaves no permit taken:
// every admitted topic's permit completes (Neutral) and the panic goes on.
func TestProduceSyncClassifierPanic(t *testing.T) {
	e := newEnv(t, counting, []string{"orders", "refunds"})
	p, err := kgoguard.New(e.cl, e.reg, kgoguard.WithClassifier(func(error) breaker.Outcome { panic("classifier bug") }))
	if err != nil {
		t.Fatal(err)
	}
	kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, nil)
	func() {
		defer func() {
			if recover() != "classifier bug" {
				t.Fatal("the panic was swallowed or changed")
			}
		}()
		p.ProduceSync(context.Background(), e.record(0, 0), e.record(1, 1))
	}()
	for i := range 2 {
		if s := e.circuit(i); s.InFlight != 0 {
			t.Errorf("%s: %d permits still in flight", e.topics[i], s.InFlight)
		}
	}
}
