package outbox_test

import (
	"context"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/memory"
)

// obPurgeCountStore counts the delete batches Run asks of a memory store.
type obPurgeCountStore struct {
	*memory.Store
	batches atomic.Int64
}

func (s *obPurgeCountStore) DeleteSettled(ctx context.Context, p, d time.Time, limit int) (int, error) {
	s.batches.Add(1)
	return s.Store.DeleteSettled(ctx, p, d, limit)
}

// Run deletes settled rows once per Retention.Interval when a batch leaves nothing
// more, and once per DefaultRetentionInterval when Interval is zero: a table is not
// scanned for old rows at every poll, nor at the default pace when the user chose
// another.
func TestRunPurgesOncePerRetentionInterval(t *testing.T) {
	for _, c := range []struct {
		interval, run time.Duration
		want          int64 // batches: one at the start, then one per interval
	}{
		{30 * time.Minute, time.Hour + time.Second, 3},
		{0, 10*outbox.DefaultRetentionInterval + time.Second, 11},
	} {
		synctest.Test(t, func(t *testing.T) {
			store := &obPurgeCountStore{Store: memory.New(nil)}
			proc, err := outbox.NewProcessor(store, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
				outbox.WithPollInterval(time.Second), outbox.WithRetention(outbox.Retention{Published: time.Hour, Interval: c.interval}))
			if err != nil {
				t.Fatal(err)
			}
			stop := runInBubble(t, proc)
			time.Sleep(c.run)
			synctest.Wait()
			stop()
			if got := store.batches.Load(); got != c.want {
				t.Errorf("Interval %v: %d delete batches in %v, want %d", c.interval, got, c.run, c.want)
			}
		})
	}
}
