package breaker_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
)

// Rule 4: an open circuit rejects with the open deadline and is never extended.
func TestOpenRejectsUntilDeadlineWithoutExtending(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second})
	h.open(1)
	deadline := t0.Add(10 * time.Second)
	for i := range 9 {
		oe := h.rejected()
		if !oe.NotBefore.Equal(deadline) {
			t.Fatalf("rejection %d: NotBefore %v, want %v", i, oe.NotBefore, deadline)
		}
		if oe.Identity != "test" || oe.Scope != breaker.LocalProcess {
			t.Fatalf("rejection names %q scope %v", oe.Identity, oe.Scope)
		}
		h.clock.Advance(time.Second)
	}
	h.clock.Advance(999 * time.Millisecond)
	h.rejected()
	h.clock.Advance(time.Millisecond) // exactly at the deadline
	if p := h.acquire(); !p.Probe() {
		t.Fatal("first call after the deadline is not a probe")
	}
	if snap := h.b.Snapshot(); snap.NotBefore != (time.Time{}) {
		t.Fatalf("half-open snapshot NotBefore %v, want zero", snap.NotBefore)
	}
}

func TestOpenRejectionReusesOneErrorPerGeneration(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second})
	h.open(1)
	if a, b := h.rejected(), h.rejected(); a != b {
		t.Fatal("two rejections of one open generation allocated two errors")
	}
	ctx := context.Background()
	allocs := testing.AllocsPerRun(100, func() {
		if _, err := h.b.Acquire(ctx); err == nil {
			t.Fatal("admitted")
		}
	})
	if allocs != 0 {
		t.Fatalf("open rejection allocates %v times", allocs)
	}
	if msg := h.rejected().Error(); msg != "breaker: circuit open: test (retry after 2026-01-02T03:04:06Z)" {
		t.Fatalf("message %q", msg)
	}
}

func TestOpenSnapshotShowsDeadline(t *testing.T) {
	h := newHarness(t, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute})
	h.open(2)
	s := h.b.Snapshot()
	if s.State != breaker.Open || s.Generation != 2 || s.Failures != 2 || !s.NotBefore.Equal(t0.Add(time.Minute)) {
		t.Fatalf("snapshot %+v", s)
	}
	if got := h.reasons(); !slices.Equal(got, []string{"closed>open:failure_threshold"}) {
		t.Fatalf("transitions %v", got)
	}
}

// An OpenError says which circuit refused and until when, whether it was built by
// NewOpenError or as a literal; only a ramp's refusal has Ramping set, and every one is
// ErrOpen.
func TestOpenErrorMessageAndKinds(t *testing.T) {
	made := backend.NewOpenError("kafka:orders", breaker.LocalProcess, t0)
	literal := &breaker.OpenError{Identity: "kafka:orders", NotBefore: t0}
	want := "breaker: circuit open: kafka:orders (retry after 2026-01-02T03:04:05Z)"
	if made.Error() != want || literal.Error() != want {
		t.Fatalf("messages %q and %q, want %q", made.Error(), literal.Error(), want)
	}
	ramping := &breaker.OpenError{Identity: "kafka:orders", NotBefore: t0, Ramping: true}
	if got := ramping.Error(); got != "breaker: circuit ramping up: kafka:orders (retry after 2026-01-02T03:04:05Z)" {
		t.Fatalf("ramping message %q", got)
	}
	if isRampRefusal(made) || !errors.Is(made, breaker.ErrOpen) {
		t.Fatal("an open circuit's refusal: want ErrOpen, not a ramp refusal")
	}
	if !isRampRefusal(ramping) || !errors.Is(ramping, breaker.ErrOpen) {
		t.Fatal("a ramp's refusal: want a ramp refusal and ErrOpen")
	}
	if errors.Is(made, breaker.ErrSaturated) || errors.Is(ramping, breaker.ErrSaturated) {
		t.Fatal("a refusal of an open circuit is ErrSaturated")
	}
}

// On the system clock (no WithClock) an open circuit refuses at once until its break
// ends, a closed one with MaxInFlight hands out live permits, and a Shadow circuit
// admits what it would refuse as a bypass. No test here waits: the break is an hour.
func TestSystemClockAdmitsAndRefusesByState(t *testing.T) {
	for _, mode := range []breaker.Mode{breaker.Enforce, breaker.Shadow} {
		b, err := breaker.New("system", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Hour, MaxInFlight: 2, Mode: mode})
		if err != nil {
			t.Fatal(err)
		}
		p, err := b.Acquire(t.Context())
		if err != nil || p.Bypass() {
			t.Fatalf("%v: Acquire while closed: %v (bypass %v)", mode, err, p.Bypass())
		}
		before := time.Now()
		if !p.Complete(breaker.Failure) || b.State() != breaker.Open {
			t.Fatalf("%v: the failure did not open the circuit (state %v)", mode, b.State())
		}
		p, err = b.Acquire(t.Context())
		if mode == breaker.Shadow {
			if err != nil || !p.Bypass() {
				t.Fatalf("Shadow: Acquire while open: %v (bypass %v), want a bypass", err, p.Bypass())
			}
			continue
		}
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || oe.NotBefore.Before(before.Add(time.Hour-time.Minute)) || oe.NotBefore.After(time.Now().Add(time.Hour)) {
			t.Fatalf("Enforce: Acquire while open: %v, want an *OpenError about an hour ahead", err)
		}
	}
}
