package outbox_test

import (
	"context"
	"errors"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/memory"
)

// obWriteFailStore is a memory store whose write-backs and releases fail while
// failing is set (a database lost between a claim and its write-back); claims go on.
// A claim made while cancelOnClaim is set cancels the Run it came from, after it
// took its rows.
type obWriteFailStore struct {
	*memory.Store
	failing       atomic.Bool
	cancelOnClaim atomic.Bool
	cancel        context.CancelFunc
	releases      atomic.Int64 // failed releases
}

func (s *obWriteFailStore) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	recs, err := s.Store.Claim(ctx, r)
	if s.cancelOnClaim.Load() {
		s.cancel()
	}
	return recs, err
}

func (s *obWriteFailStore) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error) {
	if s.failing.Load() {
		return 0, errStore
	}
	return s.Store.MarkPublished(ctx, token, now, ids)
}

func (s *obWriteFailStore) Release(ctx context.Context, token string) error {
	if s.failing.Load() {
		s.releases.Add(1)
		return errStore
	}
	return s.Store.Release(ctx, token)
}

// obRunWriteFail starts a Run (one row a batch, an hour's lease) on a store whose
// writes fail from the start; onError sees each error with the count so far.
func obRunWriteFail(t *testing.T, rows int, onError func(s *obWriteFailStore, n int)) (*obWriteFailStore, context.Context, chan error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	s := &obWriteFailStore{Store: memory.New(nil), cancel: cancel}
	s.failing.Store(true)
	enqueueN(t, s.Store, rows)
	n := 0
	proc, err := outbox.NewProcessor(s, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
		outbox.WithBatchSize(1), outbox.WithLease(time.Hour), outbox.WithPollInterval(time.Second),
		outbox.WithRandom(func() float64 { return 0 }),
		outbox.WithErrorHandler(func(err error) {
			if !errors.Is(err, errStore) {
				t.Errorf("handler saw %v", err)
			}
			n++
			onError(s, n)
		}))
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	return s, ctx, done
}

// Batches cut short by a store outage, whose release failed too, are released as
// soon as a batch succeeds again, not when their leases end; Run keeps the last 64 of
// them, so the rows of an older one wait for their lease.
func TestRunReleasesFailedBatchesAgainOnceTheStoreAnswers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// 66 batches fail; the releases of the first 65 fail too.
		s, _, done := obRunWriteFail(t, 66, func(s *obWriteFailStore, n int) {
			if n == 66 {
				s.failing.Store(false)
			}
		})
		time.Sleep(30 * time.Minute) // half the lease
		synctest.Wait()
		if n := s.releases.Load(); n != 65 {
			t.Fatalf("%d releases failed, want 65", n)
		}
		for _, r := range s.Records() {
			switch {
			case r.ID == 1 && (r.Status != outbox.StatusPending || r.LeaseOwner == ""):
				t.Errorf("row 1, of the 65th batch back: %s, lease %q; want pending and still leased", r.Status, r.LeaseOwner)
			case r.ID > 1 && r.Status != outbox.StatusPublished:
				t.Errorf("row %d: %s, lease %q; want published within half its lease", r.ID, r.Status, r.LeaseOwner)
			}
		}
		s.cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	})
}

// A Run stopped while releases of failed batches are still owed makes them as it
// returns.
func TestRunStoppingReleasesEveryFailedBatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		// Three batches fail; the releases of the first two fail too; the claim after
		// them is the last.
		s, _, done := obRunWriteFail(t, 4, func(s *obWriteFailStore, n int) {
			if n == 3 {
				s.failing.Store(false)
				s.cancelOnClaim.Store(true)
			}
		})
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		for _, r := range s.Records() {
			if r.LeaseOwner != "" || r.Status != outbox.StatusPending {
				t.Errorf("row %d after Run stopped: %s, lease %q; want pending and unleased", r.ID, r.Status, r.LeaseOwner)
			}
		}
	})
}

// A Run stopped while the store still fails returns the release's error.
func TestRunStoppingWhileTheStoreIsDownSaysSo(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		_, _, done := obRunWriteFail(t, 3, func(s *obWriteFailStore, n int) {
			if n == 2 {
				s.cancelOnClaim.Store(true)
			}
		})
		if err := <-done; !errors.Is(err, errStore) {
			t.Errorf("Run = %v, want the release's error", err)
		}
	})
}

// obPurgeFailStore is a memory store whose deletes fail.
type obPurgeFailStore struct{ *memory.Store }

func (obPurgeFailStore) DeleteSettled(context.Context, time.Time, time.Time, int) (int, error) {
	return 0, errStore
}

// A retention delete that fails is passed to the error handler, as a StoreError of
// the delete; dispatching goes on.
func TestRunReportsAFailedRetentionDelete(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		s := obPurgeFailStore{memory.New(nil)}
		enqueueN(t, s.Store, 2)
		var seen []error
		proc, err := outbox.NewProcessor(s, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
			outbox.WithRetention(outbox.Retention{Published: time.Hour, Interval: time.Minute}),
			outbox.WithErrorHandler(func(err error) { seen = append(seen, err); cancel() }))
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Run(ctx); err != nil {
			t.Fatalf("Run = %v", err)
		}
		var se *outbox.StoreError
		if len(seen) != 1 || !errors.As(seen[0], &se) || se.Op != outbox.OpDeleteSettled || !errors.Is(seen[0], errStore) {
			t.Errorf("handler saw %v, want the delete's StoreError", seen)
		}
		if n := published(s.Store); n != 2 {
			t.Errorf("%d of 2 rows published", n)
		}
	})
}

// obSilentStore answers no claim until the call's context ends, then with an error
// of its own (a driver's "connection closed").
type obSilentStore struct{ *memory.Store }

var errObConnClosed = errors.New("conn closed")

func (obSilentStore) Claim(ctx context.Context, _ outbox.ClaimRequest) ([]outbox.Record, error) {
	<-ctx.Done()
	return nil, errObConnClosed
}

// A store call cut off by the store timeout is an error that matches both
// context.DeadlineExceeded and the store's own error.
func TestStoreTimeoutKeepsTheStoresError(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		var seen error
		proc, err := outbox.NewProcessor(obSilentStore{memory.New(nil)}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
			outbox.WithStoreTimeout(time.Second), outbox.WithErrorHandler(func(err error) { seen = err; cancel() }))
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Run(ctx); err != nil {
			t.Fatalf("Run = %v", err)
		}
		var se *outbox.StoreError
		if !errors.Is(seen, context.DeadlineExceeded) || !errors.Is(seen, errObConnClosed) || !errors.As(seen, &se) || se.Op != outbox.OpClaim {
			t.Errorf("handler saw %v, want a claim StoreError matching the deadline and the store's error", seen)
		}
		if !strings.Contains(seen.Error(), "no answer within 1s") {
			t.Errorf("error %q does not say the store did not answer in time", seen)
		}
	})
}
