package breaker_test

import (
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// Rule 11: observers run outside the lock, in order, and may call the circuit.
func TestObserverMayCallBackWithoutDeadlock(t *testing.T) {
	clock := fakeclock.New(t0)
	var b *breaker.Breaker
	var gens []uint64
	observe := func(tr breaker.Transition) {
		gens = append(gens, tr.Generation)
		_ = b.Snapshot() // takes the circuit's lock: must not be held here
		if tr.To == breaker.Open && tr.Reason == breaker.ReasonFailureThreshold {
			b.ForceOpen(tr.At.Add(time.Hour)) // a transition caused from inside an observer
		}
	}
	b, err := breaker.New("cb", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second},
		breaker.WithClock(clock), breaker.WithObserver(observe))
	if err != nil {
		t.Fatal(err)
	}
	p, _ := b.Acquire(t.Context())
	p.Complete(breaker.Failure)
	if len(gens) != 2 || gens[0] != 2 || gens[1] != 3 {
		t.Fatalf("generations observed %v, want [2 3]", gens)
	}
	if s := b.Snapshot(); s.Override != breaker.ForcedOpen {
		t.Fatalf("the observer's ForceOpen was lost: %+v", s)
	}
}

func TestObserversSeeTransitionsInOrderUnderConcurrency(t *testing.T) {
	clock := fakeclock.New(t0)
	var mu sync.Mutex
	var last uint64
	var count int
	b, err := breaker.New("cb", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Nanosecond},
		breaker.WithClock(clock), breaker.WithObserver(func(tr breaker.Transition) {
			mu.Lock()
			defer mu.Unlock()
			if tr.Generation != last+1 && last != 0 {
				t.Errorf("generation %d after %d", tr.Generation, last)
			}
			last = tr.Generation
			count++
		}))
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for range 500 {
				if p, err := b.Acquire(t.Context()); err == nil {
					p.Complete(breaker.Failure)
				}
				clock.Advance(time.Nanosecond)
			}
		})
	}
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if uint64(count) != b.Snapshot().Generation-1 {
		t.Fatalf("observed %d transitions, generation is %d", count, b.Snapshot().Generation)
	}
}

func TestPanickingObserverDoesNotStopLaterDeliveries(t *testing.T) {
	calls := 0
	b, _ := breaker.New("cb", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour},
		breaker.WithObserver(func(breaker.Transition) {
			calls++
			if calls == 1 {
				panic("observer bug")
			}
		}))
	func() {
		defer func() { recover() }()
		b.ForceOpen(time.Now().Add(time.Hour))
	}()
	b.ForceClose(time.Now().Add(time.Hour))
	if calls != 2 {
		t.Fatalf("observer called %d times, want 2", calls)
	}
}

// wantUnhealthySince fails unless the snapshot's UnhealthySince is want (zero: none).
func wantUnhealthySince(h *harness, want time.Time) {
	h.t.Helper()
	if got := h.b.Snapshot().UnhealthySince; !got.Equal(want) {
		h.t.Fatalf("UnhealthySince %v, want %v (state %v)", got, want, h.b.State())
	}
}

// An outage begins when a closed circuit first opens, by failures or by a hold:
// failed probes and holds within it do not move its start, closing ends it, and the
// snapshot keeps the count of failed probes.
func TestUnhealthySinceSpansOneOutage(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	wantUnhealthySince(h, time.Time{})
	h.clock.Advance(time.Second)
	opened := h.clock.Now()
	h.call(breaker.Failure)
	wantUnhealthySince(h, opened)
	h.clock.Advance(time.Second)
	h.call(breaker.Failure) // a failed probe
	wantUnhealthySince(h, opened)
	if got := h.b.Snapshot().FailedProbes; got != 1 {
		t.Fatalf("FailedProbes %d, want 1", got)
	}
	h.b.ForceOpen(h.clock.Now().Add(time.Minute))
	wantUnhealthySince(h, opened)
	h.b.ClearOverride()
	h.call(breaker.Success) // the probe closes it
	h.wantState(breaker.Closed)
	wantUnhealthySince(h, time.Time{})
	h.clock.Advance(time.Second)
	held := h.clock.Now()
	h.b.ForceOpen(held.Add(time.Minute))
	wantUnhealthySince(h, held)
	h.b.ForceClose(held.Add(time.Minute))
	wantUnhealthySince(h, time.Time{})
}
