package kafka_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// outboxOn is a memory outbox on e's clock whose Processor has no WithClassifier:
// it takes kafka.Classify from the publisher.
func outboxOn(t *testing.T, e *env) (*memory.Store, *outbox.Processor) {
	t.Helper()
	store := memory.New(e.clock)
	proc, err := outbox.NewProcessor(store, e.reg, e.pub, outbox.WithClock(e.clock), outbox.WithMaxAttempts(3),
		outbox.WithDeferralJitter(0))
	if err != nil {
		t.Fatal(err)
	}
	return store, proc
}

func enqueueN(t *testing.T, store *memory.Store, d transport.Destination, n int, value func(i int) []byte) []int64 {
	t.Helper()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Key: []byte(strconv.Itoa(i)), Value: value(i)}}
	}
	ids, err := store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// Without WithClassifier, one message over the writer's BatchBytes among 10 good
// ones: the oversized one dies alone (attempts_exhausted), the 10 are published, and
// the circuit stays closed.
func TestOutboxWithoutClassifierKillsOnlyTheOversizedMessage(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, func(e *env) { e.w.BatchBytes = 1024 }, "orders")
	store, proc := outboxOn(t, e)
	d := e.dest(0)
	ids := enqueueN(t, store, d, 11, func(i int) []byte {
		if i == 5 {
			return []byte(strings.Repeat("x", 4096))
		}
		return []byte("good-" + strconv.Itoa(i))
	})
	for range 5 {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Hour)
	}
	for i, id := range ids {
		r, _ := store.Get(id)
		want := outbox.StatusPublished
		if i == 5 {
			want = outbox.StatusDead
		}
		if r.Status != want {
			t.Errorf("row %d: %s (%q), want %s", i, r.Status, r.LastError, want)
		}
		if i == 5 && storekit.DeadReason(r.LastError) != outbox.ReasonAttemptsExhausted {
			t.Errorf("oversized row died of %q", r.LastError)
		}
	}
	if got := harness.ReadTopic(t, e.brokers, e.topics[0], 10); len(got) != 10 {
		t.Errorf("read %d records, want 10", len(got))
	}
	if s := e.circuit(0); s.State != breaker.Closed || s.Failures != 0 {
		t.Errorf("circuit %+v, want closed without failures", s)
	}
}

// A topic that does not exist for ten minutes of the outbox's clock, then is
// created: no row dies or spends an attempt, the registry says why, and the rows go
// out in order once it exists.
func TestOutboxHoldsAnUnknownTopicUntilItIsCreated(t *testing.T) {
	e := newEnv(t, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, func(e *env) { e.tr.MetadataTTL = 50 * time.Millisecond }, "orders")
	e.needKFake()
	store, proc := outboxOn(t, e)
	late := harness.TopicNames("late")[0]
	d := transport.Destination{Broker: "kafka", Name: late}
	ids := enqueueN(t, store, d, 20, func(i int) []byte { return []byte(strconv.Itoa(i)) })
	start := e.clock.Now()
	for e.clock.Now().Sub(start) < 10*time.Minute {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		until, held := store.HeldUntil(d)
		if !held {
			t.Fatal("the unknown topic is not held")
		}
		if s, _ := e.reg.Snapshot(d); s.State != breaker.Closed || !strings.Contains(s.Unusable, "Unknown Topic Or Partition") {
			t.Fatalf("snapshot %+v, want closed and unusable", s)
		}
		e.clock.Set(until)
	}
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Fatalf("row %d: %s, %d attempts", id, r.Status, r.Attempts)
		}
	}
	createTopics(t, e.brokers, []string{late})
	deadline := time.Now().Add(20 * time.Second) // the writer learns of the topic from its metadata
	for !allPublished(store, ids) && time.Now().Before(deadline) {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		if until, held := store.HeldUntil(d); held {
			e.clock.Set(until)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !allPublished(store, ids) {
		t.Fatal("the rows were not published after the topic was created")
	}
	for i, r := range harness.ReadTopic(t, e.brokers, late, 20) {
		if string(r.Value) != strconv.Itoa(i) {
			t.Fatalf("record %d is %q: out of order", i, r.Value)
		}
	}
}

func allPublished(store *memory.Store, ids []int64) bool {
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPublished {
			return false
		}
	}
	return true
}
