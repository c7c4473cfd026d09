package outbox_test

import (
	"context"
	"errors"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// chanWaker is a Waker the test drives: every value sent on bursts makes Listen call
// wake that many times in a row, then send on sent (when not nil).
type chanWaker struct {
	bursts chan int
	sent   chan struct{}
	err    error // returned by Listen at once when set
}

func (w *chanWaker) Listen(ctx context.Context, wake func()) error {
	if w.err != nil {
		return w.err
	}
	for {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case n := <-w.bursts:
			for range n {
				wake()
			}
			if w.sent != nil {
				w.sent <- struct{}{}
			}
		}
	}
}

// countingStore counts claims; while gate is open (not nil, not closed) each claim
// waits for it to close.
type countingStore struct {
	*memory.Store
	claims atomic.Int64
	gate   atomic.Pointer[chan struct{}]
}

func (s *countingStore) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	s.claims.Add(1)
	if g := s.gate.Load(); g != nil {
		<-*g
	}
	return s.Store.Claim(ctx, r)
}

// runInBubble starts proc.Run and returns a stop that cancels it and checks it
// returned nil.
func runInBubble(t *testing.T, proc *outbox.Processor) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- proc.Run(ctx) }()
	return func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run = %v", err)
		}
	}
}

func TestRunClaimsOnceForABurstOfSignals(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &countingStore{Store: memory.New(nil)}
		w := &chanWaker{bursts: make(chan int), sent: make(chan struct{})}
		pub := &fakePublisher{}
		proc, err := outbox.NewProcessor(store, nil, pub, outbox.WithClassifier(outageOnError), outbox.WithPollInterval(time.Hour), outbox.WithWaker(w))
		if err != nil {
			t.Fatal(err)
		}
		stop := runInBubble(t, proc)
		defer stop()
		synctest.Wait() // the first claim found nothing; Run waits
		if n := store.claims.Load(); n != 1 {
			t.Fatalf("%d claims before any row, want 1", n)
		}

		start := time.Now()
		enqueueN(t, store.Store, 3)
		// A thousand commits' notifications, arriving while the claim the first one
		// started is still running (it waits for the gate).
		gate := make(chan struct{})
		store.gate.Store(&gate)
		w.bursts <- 1000
		<-w.sent
		store.gate.Store(nil)
		close(gate)
		synctest.Wait()
		if n := published(store.Store); n != 3 {
			t.Fatalf("%d of 3 rows published after the signal", n)
		}
		if time.Since(start) != 0 {
			t.Errorf("the signalled rows waited %v", time.Since(start))
		}
		// One claim took the rows, the next (which the signals that came meanwhile had
		// asked for) found nothing: 1000 signals, two claims.
		if n := store.claims.Load() - 1; n != 2 {
			t.Errorf("%d claims for a burst of 1000 signals, want 2", n)
		}
	})
}

func TestRunClaimsAgainAtOnceAfterABatchThatWasNotFull(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var store *memory.Store
		pub := &fakePublisher{}
		pub.fn = func(context.Context, transport.Destination, []transport.Message) error {
			if len(pub.calls) == 1 { // a row committed while the first batch is out
				enqueueN(t, store, 1)
			}
			return nil
		}
		store, proc := runFixture(t, pub, outbox.WithBatchSize(10), outbox.WithPollInterval(time.Hour))
		enqueueN(t, store, 2)
		start := time.Now()
		stop := runInBubble(t, proc)
		defer stop()
		synctest.Wait()
		if n := published(store); n != 3 {
			t.Fatalf("%d of 3 rows published before the first wait", n)
		}
		if time.Since(start) != 0 {
			t.Errorf("the row enqueued during a batch waited %v", time.Since(start))
		}
	})
}

func TestRunReportsAWakerThatCannotListenAndKeepsPolling(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		errListen := errors.New("cannot listen")
		store := memory.New(nil)
		var seen []error
		proc, err := outbox.NewProcessor(store, nil, &fakePublisher{}, outbox.WithClassifier(outageOnError), outbox.WithPollInterval(time.Second),
			outbox.WithWaker(&chanWaker{err: errListen}), outbox.WithErrorHandler(func(err error) { seen = append(seen, err) }))
		if err != nil {
			t.Fatal(err)
		}
		stop := runInBubble(t, proc)
		defer stop()
		synctest.Wait()
		if len(seen) != 1 || !errors.Is(seen[0], errListen) {
			t.Fatalf("handler saw %v, want the Waker's error", seen)
		}
		enqueueN(t, store, 1)
		time.Sleep(time.Second)
		synctest.Wait()
		if n := published(store); n != 1 {
			t.Errorf("%d rows published after a poll interval without a Waker, want 1", n)
		}
	})
}

func TestWithWakerNil(t *testing.T) {
	if _, err := outbox.NewProcessor(memory.New(nil), nil, &fakePublisher{}, outbox.WithClassifier(outageOnError), outbox.WithWaker(nil)); err == nil {
		t.Fatal("WithWaker(nil) accepted")
	}
}

// The memory store wakes the Processor on Enqueue, given as its Waker or, without
// WithWaker, offered by the store as its CommitWaker.
func TestMemoryStoreWakesTheProcessorOnEnqueue(t *testing.T) {
	for name, setup := range map[string]func(*memory.Store) (outbox.Store, []outbox.ProcessorOption){
		"WithWaker": func(m *memory.Store) (outbox.Store, []outbox.ProcessorOption) {
			return m, []outbox.ProcessorOption{outbox.WithWaker(m)}
		},
		"CommitWaker": func(m *memory.Store) (outbox.Store, []outbox.ProcessorOption) { return obWakingStore{m}, nil },
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				store := memory.New(nil)
				s, opts := setup(store)
				proc, err := outbox.NewProcessor(s, nil, &fakePublisher{}, append(opts, outbox.WithClassifier(outageOnError), outbox.WithPollInterval(time.Hour))...)
				if err != nil {
					t.Fatal(err)
				}
				stop := runInBubble(t, proc)
				defer stop()
				synctest.Wait()
				start := time.Now()
				enqueueN(t, store, 2)
				synctest.Wait()
				if n := published(store); n != 2 || time.Since(start) != 0 {
					t.Errorf("%d of 2 rows published after %v; want both at once", n, time.Since(start))
				}
			})
		})
	}
}

// obWakingStore is a memory store that offers itself as its CommitWaker.
type obWakingStore struct{ *memory.Store }

func (s obWakingStore) CommitWaker() outbox.Waker { return s.Store }
