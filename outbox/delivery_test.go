package outbox_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

var (
	errDown = errors.New("broker down")
	errBad  = errors.New("message refused")
)

// classifyDownBad calls errDown the broker's fault and everything else the message's.
func classifyDownBad(err error) breaker.Outcome {
	if errors.Is(err, errDown) {
		return breaker.Failure
	}
	return breaker.Neutral
}

func (f *fixture) enqueueKeyed(t *testing.T, d transport.Destination, keys ...string) []int64 {
	t.Helper()
	entries := make([]outbox.Entry, len(keys))
	for i, k := range keys {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Key: []byte(k), Value: []byte(k)}}
	}
	ids, err := f.store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

// When a batch fails for a message's reason its rows go out one at a time; none of
// them may go out once the claim's lease has ended, since another dispatcher may
// have taken the rows over by then (a duplicate).
func TestRowsSentOneByOneStopAtTheLeaseEnd(t *testing.T) {
	const lease = 10 * time.Second
	f := newFixture(t, policy, outbox.WithLease(lease), outbox.WithClassifier(classifyDownBad))
	f.enqueueKeyed(t, orders, "a", "b", "c")
	var starts []time.Time
	f.inner.fn = func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
		starts = append(starts, f.clock.Now())
		f.clock.Advance(6 * time.Second)
		if len(msgs) > 1 {
			return errBad
		}
		return nil
	}
	_, err := f.proc.ProcessPending(context.Background())
	if !errors.Is(err, outbox.ErrLeaseExpired) {
		t.Fatalf("ProcessPending: %v, want ErrLeaseExpired", err)
	}
	leaseEnd := t0.Add(lease)
	for i, at := range starts {
		if !at.Before(leaseEnd) {
			t.Errorf("publish %d started at +%v, after the lease ended at +%v", i, at.Sub(t0), lease)
		}
	}
	if len(starts) != 2 {
		t.Errorf("%d publishes, want the batch and one row before the lease ended", len(starts))
	}
}

// Entries of a batch that failed because the broker is down are held, not charged;
// the entries the broker refused cost an attempt; the rest are published.
func TestPartialBatchHoldsTheBrokersFailuresAndChargesTheMessages(t *testing.T) {
	f := newFixture(t, policy, outbox.WithClassifier(classifyDownBad))
	ids := f.enqueueKeyed(t, orders, "a", "b", "c")
	f.inner.fn = func(_ context.Context, d transport.Destination, msgs []transport.Message) error {
		return &transport.BatchError{Destination: d, Failed: []transport.MessageError{{Index: 0, Err: errDown}, {Index: 2, Err: errBad}}}
	}
	f.process(t)
	down, ok, bad := f.get(t, ids[0]), f.get(t, ids[1]), f.get(t, ids[2])
	if down.Status != outbox.StatusPending || down.Attempts != 0 || down.Deferrals != 1 {
		t.Errorf("entry the broker failed: %s, attempts %d, deferrals %d; want pending, 0, 1", down.Status, down.Attempts, down.Deferrals)
	}
	if ok.Status != outbox.StatusPublished {
		t.Errorf("entry that went out: %s, want published", ok.Status)
	}
	if bad.Status != outbox.StatusPending || bad.Attempts != 1 || bad.LastError != errBad.Error() {
		t.Errorf("entry the broker refused: %s, attempts %d, last error %q; want pending, 1, %q", bad.Status, bad.Attempts, bad.LastError, errBad)
	}
}

// A batch of one that fails for the message's reason is charged at once: sending it
// again alone would publish the row twice per attempt.
func TestASingleFailingRowIsSentOncePerAttempt(t *testing.T) {
	f := newFixture(t, policy, outbox.WithClassifier(classifyDownBad))
	ids := f.enqueueKeyed(t, orders, "a")
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errBad }
	f.process(t)
	if n := f.inner.callsTo(orders); n != 1 {
		t.Errorf("%d publishes of the row, want 1", n)
	}
	if r := f.get(t, ids[0]); r.Attempts != 1 {
		t.Errorf("attempts %d, want 1", r.Attempts)
	}
}
