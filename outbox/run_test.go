package outbox_test

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// runFixture builds a processor on the bubble's clock (time.Now is virtual inside
// synctest.Test).
func runFixture(t *testing.T, pub *fakePublisher, opts ...outbox.ProcessorOption) (*outbox.MemoryStore, *outbox.Processor) {
	t.Helper()
	store := outbox.NewMemoryStore(nil)
	reg, err := registry.New(breaker.DisabledPolicy())
	if err != nil {
		t.Fatal(err)
	}
	proc, err := outbox.NewProcessor(store, reg, reg.Guard(pub, nil), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return store, proc
}

func enqueueN(t *testing.T, s *outbox.MemoryStore, n int) {
	t.Helper()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("v")}}
	}
	if _, err := s.Enqueue(context.Background(), entries...); err != nil {
		t.Fatal(err)
	}
}

func published(s *outbox.MemoryStore) (n int) {
	for _, r := range s.Records() {
		if r.Status == outbox.StatusPublished {
			n++
		}
	}
	return n
}

func TestRunGoesAgainAtOnceAfterAFullBatchAndPollsWhenIdle(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		pub := &fakePublisher{}
		store, proc := runFixture(t, pub, outbox.WithBatchSize(10), outbox.WithPollInterval(time.Minute))
		enqueueN(t, store, 25)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		start := time.Now()
		go func() { done <- proc.Run(ctx) }()

		synctest.Wait() // Run is blocked on its poll timer
		if n := published(store); n != 25 {
			t.Fatalf("%d of 25 rows published before the first idle wait", n)
		}
		if len(pub.calls) != 3 {
			t.Errorf("%d publishes, want 3 batches", len(pub.calls))
		}
		if time.Since(start) != 0 {
			t.Errorf("Run waited %v between full batches", time.Since(start))
		}

		enqueueN(t, store, 1)
		time.Sleep(time.Minute - time.Nanosecond) // virtual time
		synctest.Wait()
		if n := published(store); n != 25 {
			t.Fatalf("a row was published before the poll interval ended")
		}
		time.Sleep(time.Nanosecond)
		synctest.Wait()
		if n := published(store); n != 26 {
			t.Fatalf("%d published after the poll interval, want 26", n)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v after cancel, want nil", err)
		}
	})
}

func TestRunStopsCleanlyLeavingNoRowLeased(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		started := make(chan struct{})
		pub := &fakePublisher{fn: func(ctx context.Context, _ transport.Destination, _ []transport.Message) error {
			close(started)
			<-ctx.Done() // a publish in flight when the dispatcher is stopped
			return ctx.Err()
		}}
		store, proc := runFixture(t, pub)
		enqueueN(t, store, 5)
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- proc.Run(ctx) }()
		<-started
		if r := store.Records()[0]; !strings.HasPrefix(r.LeaseOwner, proc.Owner()+"/") {
			t.Fatalf("row not leased during the publish: %+v", r)
		}

		cancel()
		if err := <-done; err != nil {
			t.Fatalf("Run = %v", err)
		}
		for _, r := range store.Records() {
			if r.LeaseOwner != "" || r.Status != outbox.StatusPending || r.Attempts != 0 {
				t.Errorf("row %d after stop: %+v; want pending, unleased, no attempt", r.ID, r)
			}
		}
	})
}

// failingStore fails every claim.
type failingStore struct{ *outbox.MemoryStore }

var errStore = errors.New("store down")

func (failingStore) Claim(context.Context, outbox.ClaimRequest) ([]outbox.Record, error) {
	return nil, errStore
}

func TestRunErrors(t *testing.T) {
	t.Run("without a handler Run returns the error", func(t *testing.T) {
		proc, err := outbox.NewProcessor(failingStore{outbox.NewMemoryStore(nil)}, nil, &fakePublisher{})
		if err != nil {
			t.Fatal(err)
		}
		if err := proc.Run(context.Background()); !errors.Is(err, errStore) {
			t.Fatalf("Run = %v, want the store's error", err)
		}
	})
	t.Run("with a handler Run carries on after the poll interval", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var seen []error
			ctx, cancel := context.WithCancel(context.Background())
			proc, err := outbox.NewProcessor(failingStore{outbox.NewMemoryStore(nil)}, nil, &fakePublisher{},
				outbox.WithPollInterval(time.Second),
				outbox.WithErrorHandler(func(err error) {
					seen = append(seen, err)
					if len(seen) == 3 {
						cancel()
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := proc.Run(ctx); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if len(seen) != 3 || !errors.Is(seen[0], errStore) {
				t.Errorf("handler saw %v", seen)
			}
			if got := time.Since(start); got != 2*time.Second {
				t.Errorf("three tries took %v, want two poll intervals", got)
			}
		})
	})
}
