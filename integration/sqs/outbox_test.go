package sqs_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// outboxFor is a memory outbox on g's clock whose Processor takes sqs.Classify from
// the publisher (no WithClassifier).
func outboxFor(t *testing.T, g *guard) (*memory.Store, *outbox.Processor) {
	t.Helper()
	store := memory.New(g.clock)
	proc, err := outbox.NewProcessor(store, g.reg, g.pub, outbox.WithClock(g.clock), outbox.WithMaxAttempts(3),
		outbox.WithDeferralJitter(0))
	if err != nil {
		t.Fatal(err)
	}
	return store, proc
}

// receiveAll receives and deletes every message of the queue at url, in order.
func receiveAll(t *testing.T, c *awssqs.Client, url string) []string {
	t.Helper()
	var bodies []string
	for empty := 0; empty < 2; {
		out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 10})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			empty++
			continue
		}
		for _, m := range out.Messages {
			bodies = append(bodies, aws.ToString(m.Body))
			if _, err := c.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatal(err)
			}
		}
	}
	return bodies
}

// 20 outbox rows with equal bodies to a FIFO queue with ContentBasedDeduplication:
// each row's id is its message's deduplication id, so all 20 are delivered. The
// same 20 published without ids are deduplicated by content to one, as SQS does.
func TestOutboxRowsWithEqualBodiesAllReachAFIFOQueue(t *testing.T) {
	e := newEnv(t)
	c := client(t, e.endpoint, nil)
	fifo := map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}
	g := newGuard(t, c, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute})
	same := transport.Message{Key: []byte("group"), Value: []byte("same body")}

	plain := e.queue(t, c, "plain.fifo", fifo)
	twenty := make([]transport.Message, 20)
	for i := range twenty {
		twenty[i] = same
	}
	if err := g.pub.Publish(context.Background(), dest(plain), twenty...); err != nil {
		t.Fatal(err)
	}
	baseline := len(receiveAll(t, c, queueURL(t, c, plain)))

	q := e.queue(t, c, "jobs.fifo", fifo)
	store, proc := outboxFor(t, g)
	entries := make([]outbox.Entry, 20)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: dest(q), Message: same}
	}
	ids, err := store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := proc.ProcessPending(context.Background()); err != nil {
		t.Fatal(err)
	}
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPublished {
			t.Fatalf("row %d: %s (%q)", id, r.Status, r.LastError)
		}
	}
	got := len(receiveAll(t, c, queueURL(t, c, q)))
	t.Logf("20 equal bodies: %d delivered through the outbox, %d published without ids", got, baseline)
	if got != 20 || baseline != 1 {
		t.Errorf("%d delivered through the outbox (want 20), %d without ids (want 1, SQS's content deduplication)", got, baseline)
	}
}

// A queue that does not exist for ten minutes of the outbox's clock, then is
// created: no row dies or spends an attempt, the registry says why, and the rows go
// out in order once it exists.
func TestOutboxHoldsAMissingQueueUntilItIsCreated(t *testing.T) {
	e := newEnv(t)
	c := client(t, e.endpoint, nil)
	g := newGuard(t, c, breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute})
	store, proc := outboxFor(t, g)
	name := "late" + e.suffix
	d := dest(name)
	entries := make([]outbox.Entry, 20)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Value: []byte(strconv.Itoa(i))}}
	}
	ids, err := store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	start := g.clock.Now()
	for g.clock.Now().Sub(start) < 10*time.Minute {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		until, held := store.HeldUntil(d)
		if !held {
			t.Fatal("the missing queue is not held")
		}
		if s, _ := g.reg.Snapshot(d); s.State != breaker.Closed || !strings.Contains(s.Unusable, "NonExistentQueue") && !strings.Contains(s.Unusable, "QueueDoesNotExist") {
			t.Fatalf("snapshot %+v, want closed and unusable", s)
		}
		g.clock.Set(until)
	}
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Fatalf("row %d: %s, %d attempts", id, r.Status, r.Attempts)
		}
	}
	e.queue(t, c, "late", nil)
	for range 5 {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		if until, held := store.HeldUntil(d); held {
			g.clock.Set(until)
		}
	}
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPublished {
			t.Fatalf("row %d after the queue was created: %s (%q)", id, r.Status, r.LastError)
		}
	}
	got := receiveAll(t, c, queueURL(t, c, name))
	if len(got) != 20 {
		t.Fatalf("received %d, want 20", len(got))
	}
	if s, _ := g.reg.Snapshot(d); s.Unusable != "" {
		t.Errorf("still unusable: %q", s.Unusable)
	}
}
