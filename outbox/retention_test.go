package outbox_test

import (
	"context"
	"errors"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

func TestRunDeletesSettledRowsAfterTheirRetention(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pub := &fakePublisher{fn: func(_ context.Context, _ transport.Destination, msgs []transport.Message) error {
			if string(msgs[0].Value) == "poison" {
				return errors.New("rejected")
			}
			return nil
		}}
		r := outbox.Retention{Published: time.Hour, Dead: 24 * time.Hour, BatchSize: 2, Interval: time.Minute}
		store, proc := runFixture(t, pub, outbox.WithRetention(r), outbox.WithMaxAttempts(1), outbox.WithPollInterval(time.Second),
			outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Neutral })) // the message's own failure

		enqueueN(t, store, 5) // 5 rows: more than two batches of 2
		if _, err := store.Enqueue(context.Background(), outbox.Entry{Destination: emails, Message: transport.Message{Value: []byte("poison")}}); err != nil {
			t.Fatal(err)
		}
		stop := runInBubble(t, proc)
		defer stop()
		synctest.Wait()
		if n := len(store.Records()); n != 6 {
			t.Fatalf("%d rows right after dispatch, want all 6 kept", n)
		}

		time.Sleep(time.Hour + time.Minute) // past the published rows' retention
		synctest.Wait()
		left := store.Records()
		if len(left) != 1 || left[0].Status != outbox.StatusDead {
			t.Fatalf("after an hour: %d rows left (%+v), want only the dead one", len(left), left)
		}

		time.Sleep(24 * time.Hour)
		synctest.Wait()
		if n := len(store.Records()); n != 0 {
			t.Fatalf("%d rows after a day, want the dead row deleted too", n)
		}
	})
}

func TestPurgeDeletesInBatchesForACronJob(t *testing.T) {
	f := newFixture(t, policy)
	f.enqueue(t, orders, 7)
	f.process(t)
	// Nothing is old enough yet.
	if n, err := outbox.Purge(context.Background(), f.store, outbox.Retention{Published: time.Minute, BatchSize: 3}, f.clock.Now()); n != 0 || err != nil {
		t.Fatalf("Purge = %d, %v on fresh rows", n, err)
	}
	f.clock.Advance(2 * time.Minute)
	counting := &countingPurger{Purger: f.store}
	n, err := outbox.Purge(context.Background(), counting, outbox.Retention{Published: time.Minute, BatchSize: 3}, f.clock.Now())
	if n != 7 || err != nil {
		t.Fatalf("Purge = %d, %v, want 7 rows deleted", n, err)
	}
	if counting.calls != 3 { // 3 + 3 + 1
		t.Errorf("%d delete batches of at most 3 for 7 rows, want 3", counting.calls)
	}
}

type countingPurger struct {
	outbox.Purger
	calls int
}

func (c *countingPurger) DeleteSettled(ctx context.Context, p, d time.Time, limit int) (int, error) {
	c.calls++
	return c.Purger.DeleteSettled(ctx, p, d, limit)
}

func TestRetentionValidation(t *testing.T) {
	for _, r := range []outbox.Retention{
		{},
		{Published: -time.Second},
		{Published: time.Hour, Dead: -time.Second},
		{Published: time.Hour, BatchSize: -1},
		{Published: time.Hour, Interval: -1},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v accepted", r)
		}
		if _, err := outbox.NewProcessor(memory.New(nil), nil, &fakePublisher{}, outbox.WithClassifier(outageOnError), outbox.WithRetention(r)); err == nil {
			t.Errorf("WithRetention(%+v) accepted", r)
		}
	}
	_, err := outbox.NewProcessor(failingStore{}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError), outbox.WithRetention(outbox.Retention{Dead: time.Hour}))
	if err != nil {
		t.Errorf("a memory.Store embedded in another store is a Purger: %v", err)
	}
	_, err = outbox.NewProcessor(claimOnly{}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError), outbox.WithRetention(outbox.Retention{Dead: time.Hour}))
	if err == nil {
		t.Error("WithRetention accepted a store that cannot delete")
	}
}

// claimOnly is a Store and nothing more.
type claimOnly struct{ outbox.Store }
