package sharedstate_test

// New's defaults and what it keeps of the Config (circuit.go: New).

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// RetryDelay 0 means one second.
func TestZeroRetryDelayMeansOneSecond(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := freshCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = 0 })
	d.Down(errDown)
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
		t.Fatal(err)
	}
	d.Down(nil)
	loads := d.count("load")
	clock.Advance(time.Second - 1)
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) || d.count("load") != loads {
		t.Fatalf("1ns short of a second after a failed read: %v after %d reads; want the failure, no read", err, d.count("load")-loads)
	}
	clock.Advance(1)
	if err := c.Refresh(context.Background()); err != nil || d.count("load") != loads+1 {
		t.Fatalf("a second after a failed read: %v after %d reads; want one successful read", err, d.count("load")-loads)
	}
}

// The break is spread by Jitter with the configured Random, or with a random source
// of New's own when none is configured.
func TestJitterUsesTheConfiguredRandomOrADefault(t *testing.T) {
	for _, tc := range []struct {
		name   string
		random func() float64
		lo, hi time.Duration
	}{
		{"configured", func() float64 { return 1 }, 90 * time.Second, 90 * time.Second},
		{"default", nil, 30 * time.Second, 90 * time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newHookedDriver()
			c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.Jitter, cfg.Random = 0.5, tc.random })
			tripCircuit(t, c)
			r := storedRecord(t, d.MemoryDriver)
			if got := time.Duration(r.OpenUntil - clock.Now().UnixNano()); r.State != breaker.Open || got < tc.lo || got > tc.hi {
				t.Fatalf("opened %+v, for %v; want open for %v to %v", r, got, tc.lo, tc.hi)
			}
		})
	}
}

// A record written by an earlier release carries breaker.Policy.Fingerprint; it is
// accepted and kept, so that a rolling upgrade does not refuse it.
func TestRecordWithTheLegacyFingerprintIsAccepted(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newHookedDriver()
	c := freshCircuit(t, d, clock, nil)
	legacy := backend.Fingerprint(c.Policy())
	if storedRecord(t, d.MemoryDriver).Fingerprint == legacy {
		t.Fatal("the engine's fingerprint is the legacy one: nothing to test")
	}
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.Fingerprint = legacy })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatalf("record with the legacy fingerprint: %v", err)
	}
	if ok, err := acquireNeutral(c); !ok {
		t.Fatal(err)
	}
	if r := storedRecord(t, d.MemoryDriver); r.Fingerprint != legacy {
		t.Fatalf("fingerprint %q after reading it; want the legacy one kept", r.Fingerprint)
	}
}

// The owner written into probe leases is the configured one; without one, a name of
// this process.
func TestOwnerIsTheConfiguredOne(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := ruleCircuit(t, newCounting(), clock, func(cfg *sharedstate.Config) { cfg.Owner = "replica-7" })
	if c.Owner() != "replica-7" {
		t.Errorf("Owner() = %q, want the configured replica-7", c.Owner())
	}
	if c := ruleCircuit(t, newCounting(), clock, nil); c.Owner() == "" {
		t.Error("no owner without a configured one")
	}
}
