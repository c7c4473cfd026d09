package saramaguard_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/IBM/sarama"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/kafkacode"
	"github.com/brokerguard/brokerguard/internal/kfakeproduce"
	"github.com/brokerguard/brokerguard/saramaguard"
	"github.com/brokerguard/brokerguard/transport"
)

// A failing topic opens its own circuit only: in one SendMessages its messages are
// refused, by index, without reaching the broker, and the other topic's are sent.
func TestSendMessagesSplitByTopic(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}, "bad", "good")
	_, p := e.sync()
	answered := kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, func(topic string) bool { return topic == e.topics[0] })
	ctx := context.Background()
	for i := range 2 {
		if err := p.Publish(ctx, e.dest(0), msg(i)); !errors.Is(err, sarama.ErrNotLeaderForPartition) {
			t.Fatalf("publish %d: %v", i, err)
		}
	}
	sent := answered.Load()
	err := p.SendMessages(ctx, []*sarama.ProducerMessage{e.message(0, 1), e.message(1, 2), e.message(0, 3), e.message(1, 4)})
	var se *saramaguard.SendError
	if !errors.As(err, &se) || len(se.Failed) != 2 || se.Failed[0].Index != 0 || se.Failed[1].Index != 2 || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("SendMessages: %v, want indexes 0 and 2 refused by the open circuit", err)
	}
	if answered.Load() != sent {
		t.Errorf("the broker saw %d produce requests for the open topic", answered.Load()-sent)
	}
	if s := e.circuit(1); s.State != breaker.Closed || s.Failures != 0 {
		t.Errorf("good topic's circuit: %+v", s)
	}
}

// Per-message failures of one topic come back by index, and count once.
func TestSendMessagesPerMessageErrors(t *testing.T) {
	e := newEnv(t, counting, "orders")
	_, p := e.sync()
	kfakeproduce.Answer(e.cluster, int16(sarama.ErrNotLeaderForPartition), true, nil)
	err := p.Publish(context.Background(), e.dest(0), msg(0), msg(1), msg(2))
	var be *transport.BatchError
	if !errors.As(err, &be) || len(be.Failed) != 3 || be.Failed[2].Index != 2 {
		t.Fatalf("Publish: %v", err)
	}
	if s := e.circuit(0); s.Failures != 1 || s.InFlight != 0 {
		t.Errorf("circuit: %d failures, %d in flight; want 1, 0", s.Failures, s.InFlight)
	}
}

func (e *env) async() *saramaguard.AsyncProducer {
	e.t.Helper()
	p, err := saramaguard.NewAsyncProducer(e.cluster.ListenAddrs(), e.config(), e.reg)
	if err != nil {
		e.t.Fatal(err)
	}
	e.t.Cleanup(func() { p.Close() })
	return p
}

// drain reads an AsyncProducer's channels until they close, counting what came.
func drain(p *saramaguard.AsyncProducer, onErr func(*sarama.ProducerError)) (done chan struct{}, ok, failed *int) {
	ok, failed = new(int), new(int)
	done = make(chan struct{})
	go func() {
		defer close(done)
		successes, errs := p.Successes(), p.Errors()
		for successes != nil || errs != nil {
			select {
			case _, open := <-successes:
				if !open {
					successes = nil
					continue
				}
				*ok++
			case pe, open := <-errs:
				if !open {
					errs = nil
					continue
				}
				*failed++
				onErr(pe)
			}
		}
	}()
	return done, ok, failed
}

// Goroutines send to a failing and a healthy topic (each its own producer: a fault
// answers whole requests); every message is reported once with its own Metadata,
// every permit completes once, and the failing topic counts exactly the Failures
// that were reported.
func TestAsyncExactlyOnce(t *testing.T) {
	e := newEnv(t, counting, "bad", "good")
	kfakeproduce.Answer(e.cluster, kafkacode.NotLeaderForPartition, true, func(topic string) bool { return topic == e.topics[0] })
	const workers, each = 4, 50
	var mu sync.Mutex
	failures := 0
	producers := []*saramaguard.AsyncProducer{e.async(), e.async()}
	var dones []chan struct{}
	var oks, fails []*int
	for _, p := range producers {
		done, ok, failed := drain(p, func(pe *sarama.ProducerError) {
			if pe.Msg.Metadata != "mine" {
				t.Errorf("metadata %v", pe.Msg.Metadata)
			}
			if saramaguard.Classify(pe.Err) == breaker.Failure {
				mu.Lock()
				failures++
				mu.Unlock()
			}
		})
		dones, oks, fails = append(dones, done), append(oks, ok), append(fails, failed)
	}
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				topic := (w + i) % 2
				m := e.message(topic, i)
				m.Metadata = "mine"
				if err := producers[topic].Send(context.Background(), m); err != nil {
					t.Errorf("send: %v", err)
				}
			}
		})
	}
	wg.Wait()
	for i, p := range producers {
		p.AsyncClose()
		<-dones[i]
	}
	if got := *oks[0] + *fails[0]; got != workers*each/2 || *fails[1] != 0 || *oks[1] != workers*each/2 {
		t.Errorf("bad: %d ok %d failed; good: %d ok %d failed", *oks[0], *fails[0], *oks[1], *fails[1])
	}
	for i := range 2 {
		if s := e.circuit(i); s.InFlight != 0 {
			t.Errorf("topic %d: %d permits in flight", i, s.InFlight)
		}
	}
	if s := e.circuit(0); s.Failures != failures || failures == 0 {
		t.Errorf("bad topic: the circuit counted %d failures, %d were reported", s.Failures, failures)
	}
	// The registry counted every call once, as the circuit judged it (for telemetry).
	for _, r := range e.reg.Report() {
		if c := r.Calls; c.Total() != workers*each/2 || c.Failed != uint64(r.Snapshot.Failures) {
			t.Errorf("%s: call counts %+v for %d calls, %d failures", r.Destination, c, workers*each/2, r.Snapshot.Failures)
		}
	}
	if err := producers[0].Send(context.Background(), e.message(0, 0)); !errors.Is(err, saramaguard.ErrClosed) {
		t.Errorf("send after AsyncClose: %v", err)
	}
}

// Close with messages held by a hung broker: sarama reports them when its request
// times out, Close returns them, and every permit is completed.
func TestAsyncCloseCompletesPending(t *testing.T) {
	e := newEnv(t, counting, "orders")
	kfakeproduce.Hang(e.cluster, true, nil)
	p := e.async()
	const n = 20
	for i := range n {
		if err := p.Send(context.Background(), e.message(0, i)); err != nil {
			t.Fatal(err)
		}
	}
	err := p.Close()
	var perrs sarama.ProducerErrors
	if !errors.As(err, &perrs) || len(perrs) != n {
		t.Fatalf("Close: %v, want %d failed messages", err, n)
	}
	if s := e.circuit(0); s.InFlight != 0 {
		t.Errorf("%d permits in flight after Close", s.InFlight)
	}
}

// A config that does not return successes is refused: no permit would complete.
func TestAsyncNeedsReturnSuccesses(t *testing.T) {
	e := newEnv(t, counting, "orders")
	cfg := e.config()
	cfg.Producer.Return.Successes = false
	if _, err := saramaguard.NewAsyncProducer(e.cluster.ListenAddrs(), cfg, e.reg); err == nil {
		t.Fatal("no error")
	}
}

// When sarama's input is full (a hung broker, no buffers), Send gives up with its
// context: the message is not queued and its permit is completed at once.
func TestAsyncSendGivesUpWhenInputFull(t *testing.T) {
	e := newEnv(t, counting, "orders")
	kfakeproduce.Hang(e.cluster, true, nil)
	cfg := e.config()
	cfg.ChannelBufferSize = 0
	cfg.Net.MaxOpenRequests = 1
	cfg.Net.ReadTimeout = time.Minute // the broker stays hung for the whole test
	p, err := saramaguard.NewAsyncProducer(e.cluster.ListenAddrs(), cfg, e.reg)
	if err != nil {
		t.Fatal(err)
	}
	queued := 0
	for {
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
		err := p.Send(ctx, e.message(0, queued))
		cancel()
		if errors.Is(err, context.DeadlineExceeded) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if queued++; queued > 10000 {
			t.Fatal("sarama's input never filled")
		}
	}
	if s := e.circuit(0); s.InFlight != queued || s.Failures != 0 {
		t.Errorf("%d queued, %d permits in flight, %d failures", queued, s.InFlight, s.Failures)
	}
	e.cluster.Close() // let sarama fail what it holds, so Close returns
	p.Close()
	if s := e.circuit(0); s.InFlight != 0 {
		t.Errorf("%d permits in flight after Close", s.InFlight)
	}
}

// A classifier that panics in SendMessages leaves no permit taken: every admitted
// topic's permit completes (Neutral) and the panic goes on to the caller.
func TestSendMessagesClassifierPanic(t *testing.T) {
	e := newEnv(t, counting, "orders", "refunds")
	p, err := saramaguard.NewSyncProducer(e.cluster.ListenAddrs(), e.config(), e.reg, saramaguard.WithClassifier(func(error) breaker.Outcome { panic("classifier bug") }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	kfakeproduce.Answer(e.cluster, int16(sarama.ErrNotLeaderForPartition), true, nil)
	func() {
		defer func() {
			if recover() != "classifier bug" {
				t.Fatal("the panic was swallowed or changed")
			}
		}()
		_ = p.SendMessages(context.Background(), []*sarama.ProducerMessage{e.message(0, 0), e.message(1, 1)})
	}()
	for i := range 2 {
		if s := e.circuit(i); s.InFlight != 0 {
			t.Errorf("%s: %d permits still in flight", e.topics[i], s.InFlight)
		}
	}
}
