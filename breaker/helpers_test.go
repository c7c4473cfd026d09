package breaker_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// harness is a breaker on a fake clock that records its transitions.
type harness struct {
	t     *testing.T
	b     *breaker.Breaker
	clock *fakeclock.Clock
	seen  []breaker.Transition
}

func newHarness(t *testing.T, p breaker.Policy, opts ...breaker.Option) *harness {
	t.Helper()
	h := &harness{t: t, clock: fakeclock.New(t0)}
	opts = append([]breaker.Option{
		breaker.WithClock(h.clock),
		breaker.WithObserver(func(tr breaker.Transition) { h.seen = append(h.seen, tr) }),
	}, opts...)
	b, err := breaker.New("test", p, opts...)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.b = b
	return h
}

func (h *harness) acquire() breaker.Permit {
	h.t.Helper()
	p, err := h.b.Acquire(context.Background())
	if err != nil {
		h.t.Fatalf("Acquire: %v (state %v)", err, h.b.State())
	}
	return p
}

// call acquires and completes one call with outcome o.
func (h *harness) call(o breaker.Outcome) {
	h.t.Helper()
	if !h.acquire().Complete(o) {
		h.t.Fatalf("Complete(%v) of a fresh permit returned false", o)
	}
}

func (h *harness) calls(o breaker.Outcome, n int) {
	h.t.Helper()
	for range n {
		h.call(o)
	}
}

// rejected asserts that Acquire is refused by the open circuit and returns the error.
func (h *harness) rejected() *breaker.OpenError {
	h.t.Helper()
	_, err := h.b.Acquire(context.Background())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) {
		h.t.Fatalf("Acquire: got %v, want an *OpenError (state %v)", err, h.b.State())
	}
	return oe
}

func (h *harness) wantState(want breaker.State) {
	h.t.Helper()
	if got := h.b.State(); got != want {
		h.t.Fatalf("state %v, want %v", got, want)
	}
}

func (h *harness) wantFailures(want int) {
	h.t.Helper()
	if got := h.b.Snapshot().Failures; got != want {
		h.t.Fatalf("FailureCount %d, want %d", got, want)
	}
}

// reasons lists the transitions seen so far as "from>to:reason".
func (h *harness) reasons() []string {
	var out []string
	for _, tr := range h.seen {
		out = append(out, tr.From.String()+">"+tr.To.String()+":"+tr.Reason)
	}
	return out
}

// open trips a consecutive-mode circuit with threshold n.
func (h *harness) open(n int) {
	h.t.Helper()
	h.calls(breaker.Failure, n)
	h.wantState(breaker.Open)
}

// isRampRefusal reports whether err is a ramping circuit's refusal.
func isRampRefusal(err error) bool {
	oe, ok := errors.AsType[*breaker.OpenError](err)
	return ok && oe.Ramping
}
