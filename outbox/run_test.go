package outbox_test

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// runFixture builds a processor on the bubble's clock (time.Now is virtual inside
// synctest.Test).
func runFixture(t *testing.T, pub *fakePublisher, opts ...outbox.ProcessorOption) (*memory.Store, *outbox.Processor) {
	t.Helper()
	store := memory.New(nil)
	reg, err := registry.New(registry.Policy{Circuit: breaker.DisabledPolicy()})
	if err != nil {
		t.Fatal(err)
	}
	proc, err := outbox.NewProcessor(store, reg, reg.Guard(pub, nil), opts...)
	if err != nil {
		t.Fatal(err)
	}
	return store, proc
}

func enqueueN(t *testing.T, s *memory.Store, n int) {
	t.Helper()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("v")}}
	}
	if _, err := s.Enqueue(context.Background(), entries...); err != nil {
		t.Fatal(err)
	}
}

func published(s *memory.Store) (n int) {
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
type failingStore struct{ *memory.Store }

var errStore = errors.New("store down")

func (failingStore) Claim(context.Context, outbox.ClaimRequest) ([]outbox.Record, error) {
	return nil, errStore
}

func TestRunErrors(t *testing.T) {
	t.Run("without a handler Run logs through slog and carries on", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			logs := &countingLog{after: 3, cancel: cancel}
			old := slog.Default()
			slog.SetDefault(slog.New(logs))
			defer slog.SetDefault(old)
			proc, err := outbox.NewProcessor(failingStore{memory.New(nil)}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
				outbox.WithRandom(func() float64 { return 0 }))
			if err != nil {
				t.Fatal(err)
			}
			start := time.Now()
			if err := proc.Run(ctx); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if logs.n != 3 || !strings.Contains(logs.last, errStore.Error()) {
				t.Errorf("%d records logged, last %q", logs.n, logs.last)
			}
			// The default backoff: 100ms, then 200ms.
			if got := time.Since(start); got != 300*time.Millisecond {
				t.Errorf("three tries took %v, want 300ms", got)
			}
		})
	})
	t.Run("the backoff grows to its cap and every error is a counted StoreError", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			var seen []error
			ctx, cancel := context.WithCancel(context.Background())
			hooks := &storeErrorHooks{}
			proc, err := outbox.NewProcessor(failingStore{memory.New(nil)}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
				outbox.WithRandom(func() float64 { return 0 }), outbox.WithHooks(hooks),
				outbox.WithErrorBackoff(outbox.Backoff{Initial: time.Second, Max: 4 * time.Second, Multiplier: 2}),
				outbox.WithErrorHandler(func(err error) {
					seen = append(seen, err)
					if len(seen) == 6 {
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
			var se *outbox.StoreError
			if len(seen) != 6 || !errors.Is(seen[0], errStore) || !errors.As(seen[0], &se) || se.Op != outbox.OpClaim {
				t.Errorf("handler saw %v", seen)
			}
			if got := hooks.ops[outbox.OpClaim]; got != 6 {
				t.Errorf("RecordStoreError(claim) called %d times, want 6", got)
			}
			if got := time.Since(start); got != (1+2+4+4+4)*time.Second {
				t.Errorf("six tries took %v, want 15s (1, 2, 4, 4, 4)", got)
			}
		})
	})
	t.Run("a store that does not answer is an error within the store timeout", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			var seen []error
			var at []time.Duration
			start := time.Now()
			proc, err := outbox.NewProcessor(hangingStore{memory.New(nil)}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
				outbox.WithLease(30*time.Second), outbox.WithRandom(func() float64 { return 0 }),
				outbox.WithErrorHandler(func(err error) {
					seen, at = append(seen, err), append(at, time.Since(start))
					if len(seen) == 2 {
						cancel()
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			if err := proc.Run(ctx); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if len(seen) != 2 || !errors.Is(seen[0], context.DeadlineExceeded) {
				t.Fatalf("handler saw %v", seen)
			}
			// A third of the lease, then the backoff and another third.
			if want := []time.Duration{10 * time.Second, 20100 * time.Millisecond}; !slices.Equal(at, want) {
				t.Errorf("errors reported after %v, want %v", at, want)
			}
		})
	})
	t.Run("WithStoreTimeout sets the bound", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			start := time.Now()
			var at time.Duration
			proc, err := outbox.NewProcessor(hangingStore{memory.New(nil)}, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError),
				outbox.WithStoreTimeout(2*time.Second),
				outbox.WithErrorHandler(func(error) { at = time.Since(start); cancel() }))
			if err != nil {
				t.Fatal(err)
			}
			if err := proc.Run(ctx); err != nil {
				t.Fatalf("Run = %v", err)
			}
			if at != 2*time.Second {
				t.Errorf("error after %v, want 2s", at)
			}
		})
	})
	t.Run("bad options", func(t *testing.T) {
		for name, o := range map[string]outbox.ProcessorOption{
			"WithErrorHandler(nil)":  outbox.WithErrorHandler(nil),
			"WithStoreTimeout(0)":    outbox.WithStoreTimeout(0),
			"WithErrorBackoff(zero)": outbox.WithErrorBackoff(outbox.Backoff{}),
		} {
			if _, err := outbox.NewProcessor(memory.New(nil), nil, &fakePublisher{}, o, outbox.WithClassifier(outageOnError)); err == nil {
				t.Errorf("%s accepted", name)
			}
		}
	})
}

// hangingStore never answers a claim until the call's context ends.
type hangingStore struct{ *memory.Store }

func (hangingStore) Claim(ctx context.Context, _ outbox.ClaimRequest) ([]outbox.Record, error) {
	<-ctx.Done()
	return nil, ctx.Err()
}

// storeErrorHooks counts RecordStoreError calls by operation.
type storeErrorHooks struct {
	recordingHooks
	ops map[string]int
}

func (h *storeErrorHooks) RecordStoreError(op string) {
	if h.ops == nil {
		h.ops = map[string]int{}
	}
	h.ops[op]++
}

// countingLog is a slog.Handler that keeps the last message and cancels after some.
type countingLog struct {
	n, after int
	last     string
	cancel   func()
}

func (l *countingLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *countingLog) Handle(_ context.Context, r slog.Record) error {
	l.n++
	l.last = r.Message
	r.Attrs(func(a slog.Attr) bool { l.last += " " + a.String(); return true })
	if l.n == l.after {
		l.cancel()
	}
	return nil
}
func (l *countingLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *countingLog) WithGroup(string) slog.Handler      { return l }
