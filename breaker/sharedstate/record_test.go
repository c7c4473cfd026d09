package sharedstate_test

// What Record.Check refuses and RecordError matches (record.go), and the counters,
// versions and generations at their maximum.

import (
	"context"
	"errors"
	"math"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// goodRecord returns a valid closed record that each case of the Check tables
// changes in one field.
func goodRecord() sharedstate.Record {
	return sharedstate.Record{Version: 5, Fingerprint: "fp", State: breaker.Closed, Generation: 5, Since: 1}
}

// distinctLeases returns n leases with distinct non-zero IDs.
func distinctLeases(n int) []sharedstate.Lease {
	ls := make([]sharedstate.Lease, n)
	for i := range ls {
		ls[i] = sharedstate.Lease{ID: uint64(i + 1), Owner: "o", Expires: 2}
	}
	return ls
}

// Record.Check refuses each value no engine writes, one field at a time, naming the
// field, and accepts the values at each bound's edge.
func TestRecordCheckRefusesEachBadFieldAndAcceptsItsEdge(t *testing.T) {
	const top = uint64(1) << 63
	bad := []struct {
		name  string
		field string
		edit  func(*sharedstate.Record)
	}{
		{"version 0", "Version", func(r *sharedstate.Record) { r.Version = 0 }},
		{"version 2^63", "Version", func(r *sharedstate.Record) { r.Version = top }},
		{"generation 2^63", "Version", func(r *sharedstate.Record) { r.Generation = top }},
		{"no fingerprint", "Fingerprint", func(r *sharedstate.Record) { r.Fingerprint = "" }},
		{"generation 0", "Generation", func(r *sharedstate.Record) { r.Generation = 0 }},
		{"state below closed", "State", func(r *sharedstate.Record) { r.State = breaker.Closed - 1 }},
		{"state above half-open", "State", func(r *sharedstate.Record) { r.State = breaker.HalfOpen + 1 }},
		{"negative failures", "Failures", func(r *sharedstate.Record) { r.Failures = -1 }},
		{"negative failed probes", "Failures", func(r *sharedstate.Record) { r.FailedProbes = -1 }},
		{"negative successes", "Failures", func(r *sharedstate.Record) { r.Successes = -1 }},
		{"open without deadline", "OpenUntil", func(r *sharedstate.Record) { r.State = breaker.Open }},
		{"open with negative deadline", "OpenUntil", func(r *sharedstate.Record) { r.State, r.OpenUntil = breaker.Open, -1 }},
		{"leases while closed", "Leases", func(r *sharedstate.Record) { r.Leases = distinctLeases(1) }},
		{"leases while open", "Leases", func(r *sharedstate.Record) { r.State, r.OpenUntil, r.Leases = breaker.Open, 9, distinctLeases(1) }},
		{"too many leases", "Leases", func(r *sharedstate.Record) {
			r.State, r.Leases = breaker.HalfOpen, distinctLeases(sharedstate.MaxLeases+1)
		}},
		{"negative unhealthy since", "UnhealthySince", func(r *sharedstate.Record) { r.UnhealthySince = -1 }},
		{"negative last error at", "UnhealthySince", func(r *sharedstate.Record) { r.LastErrorAt = -1 }},
		{"long last error", "LastError", func(r *sharedstate.Record) { r.LastError = strings.Repeat("x", backend.MaxErrorText+1) }},
		{"unknown override", "Override", func(r *sharedstate.Record) { r.Override, r.OverrideUntil = breaker.ForcedClosed+1, 9 }},
		{"override without deadline", "OverrideUntil", func(r *sharedstate.Record) { r.Override = breaker.ForcedClosed }},
		{"override with negative deadline", "OverrideUntil", func(r *sharedstate.Record) { r.Override, r.OverrideUntil = breaker.ForcedClosed, -1 }},
		{"forced open but closed", "Override", func(r *sharedstate.Record) { r.Override, r.OverrideUntil = breaker.ForcedOpen, 9 }},
		{"forced closed but open", "Override", func(r *sharedstate.Record) {
			r.State, r.OpenUntil, r.Override, r.OverrideUntil = breaker.Open, 9, breaker.ForcedClosed, 9
		}},
		{"forced open but half-open", "Override", func(r *sharedstate.Record) {
			r.State, r.Override, r.OverrideUntil = breaker.HalfOpen, breaker.ForcedOpen, 9
		}},
	}
	for _, tc := range bad {
		r := goodRecord()
		tc.edit(&r)
		err := r.Check("kafka:orders")
		var re *sharedstate.RecordError
		if !errors.As(err, &re) || re.Field != tc.field || !errors.Is(err, sharedstate.ErrCorrupt) {
			t.Errorf("%s: Check = %v; want a RecordError (ErrCorrupt) naming %s", tc.name, err, tc.field)
			continue
		}
		if re.Identity != "kafka:orders" || !strings.Contains(err.Error(), `"kafka:orders"`) || !strings.Contains(err.Error(), tc.field) {
			t.Errorf("%s: error %q; want it to name the circuit and the field", tc.name, err)
		}
	}
	good := []struct {
		name string
		edit func(*sharedstate.Record)
	}{
		{"as is", func(*sharedstate.Record) {}},
		{"version 1", func(r *sharedstate.Record) { r.Version = 1 }},
		{"counters just below 2^63", func(r *sharedstate.Record) { r.Version, r.Generation = top-1, top-1 }},
		{"generation 1", func(r *sharedstate.Record) { r.Generation = 1 }},
		{"half-open without leases", func(r *sharedstate.Record) { r.State = breaker.HalfOpen }},
		{"half-open with the most leases", func(r *sharedstate.Record) {
			r.State, r.Leases = breaker.HalfOpen, distinctLeases(sharedstate.MaxLeases)
		}},
		{"open at the first instant", func(r *sharedstate.Record) { r.State, r.OpenUntil = breaker.Open, 1 }},
		{"counts set", func(r *sharedstate.Record) { r.Failures, r.FailedProbes, r.Successes = 1, 1, 1 }},
		{"times at zero and set", func(r *sharedstate.Record) { r.UnhealthySince, r.LastErrorAt = 0, 1 }},
		{"last error at the limit", func(r *sharedstate.Record) { r.LastError = strings.Repeat("x", backend.MaxErrorText) }},
		{"forced closed", func(r *sharedstate.Record) { r.Override, r.OverrideUntil = breaker.ForcedClosed, 1 }},
		{"forced open", func(r *sharedstate.Record) {
			r.State, r.OpenUntil, r.Override, r.OverrideUntil = breaker.Open, 1, breaker.ForcedOpen, 1
		}},
	}
	for _, tc := range good {
		r := goodRecord()
		tc.edit(&r)
		if err := r.Check("kafka:orders"); err != nil {
			t.Errorf("%s: Check = %v; want nil", tc.name, err)
		}
	}
}

// A RecordError matches ErrCorrupt and no other sentinel.
func TestRecordErrorIsOnlyErrCorrupt(t *testing.T) {
	err := error(&sharedstate.RecordError{Identity: "kafka:orders", Field: "State", Reason: "x"})
	if !errors.Is(err, sharedstate.ErrCorrupt) || errors.Is(err, breaker.ErrUnavailable) || errors.Is(err, sharedstate.ErrConflict) {
		t.Fatalf("errors.Is on a RecordError: ErrCorrupt %v, ErrUnavailable %v, ErrConflict %v; want only ErrCorrupt",
			errors.Is(err, sharedstate.ErrCorrupt), errors.Is(err, breaker.ErrUnavailable), errors.Is(err, sharedstate.ErrConflict))
	}
}

// RecordFields names every field of Record, in order, so that TestDriver can check a
// driver stores them all.
func TestRecordFieldsNamesEveryField(t *testing.T) {
	got := sharedstate.RecordFields()
	for _, want := range []string{"Version", "Fingerprint", "State", "Generation", "Leases", "Override", "LastError", "UnhealthySince"} {
		if !slices.Contains(got, want) {
			t.Errorf("RecordFields() = %v; want it to hold %s", got, want)
		}
	}
	if len(got) == 0 || got[0] != "Version" {
		t.Errorf("RecordFields() = %v; want Version first, as declared", got)
	}
}

// A record whose probe leases have a zero or repeated ID is refused by Check, naming
// the lease.
func TestRecordCheckRefusesBadLeaseIDs(t *testing.T) {
	for _, ids := range [][]uint64{{0}, {3, 3}} {
		r := sharedstate.Record{Version: 5, Fingerprint: "fp", State: breaker.HalfOpen, Generation: 5, Since: 1}
		for _, id := range ids {
			r.Leases = append(r.Leases, sharedstate.Lease{ID: id, Owner: "o", Expires: 2})
		}
		if err := r.Check("kafka:orders"); err == nil || !strings.Contains(err.Error(), "Leases[") {
			t.Errorf("leases %v: Check = %v, want an error naming the lease", ids, err)
		}
	}
}

// A stored counter at the int64 maximum (a record written by hand, or by an attacker
// with write access to the store) must not make the engine write a record that its
// own check refuses: that record would admit nothing on any replica, and no override
// could repair it. Counters stop at the maximum instead.
func TestCountersAtTheMaximumDoNotOverflow(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 3, BreakDuration: time.Second,
		SuccessesToClose: 2, HalfOpenMaxProbes: 2}
	fp, desc := sharedstate.Fingerprint(p)
	ctx := context.Background()
	for _, tt := range []struct {
		name    string
		rec     sharedstate.Record
		outcome breaker.Outcome
	}{
		{"failed probe", sharedstate.Record{State: breaker.Open, OpenUntil: 1, FailedProbes: math.MaxInt64}, breaker.Failure},
		{"probe success", sharedstate.Record{State: breaker.HalfOpen, Successes: math.MaxInt64}, breaker.Success},
	} {
		t.Run(tt.name, func(t *testing.T) {
			store := &circuittest.MemoryDriver{}
			r := tt.rec
			r.Version, r.Generation, r.Fingerprint, r.Policy = 7, 7, fp, desc
			if err := store.Replace(ctx, "kafka:orders", 0, r); err != nil {
				t.Fatal(err)
			}
			c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
				Driver: store, Clock: clock, RetryDelay: -1})
			if err != nil {
				t.Fatal(err)
			}
			permit, err := c.Acquire(ctx)
			if err != nil {
				t.Fatalf("Acquire (a probe): %v", err)
			}
			permit.Complete(tt.outcome)
			stored, err := store.Load(ctx, "kafka:orders")
			if err != nil {
				t.Fatal(err)
			}
			if err := stored.Check("kafka:orders"); err != nil {
				t.Fatalf("the engine wrote a record it refuses: %v (%+v)", err, stored)
			}
			if stored.Generation == 7 {
				t.Fatalf("the probe's outcome wrote no transition: %+v", stored)
			}
			clock.Advance(time.Hour)
			if permit, err := c.Acquire(ctx); errors.Is(err, breaker.ErrUnavailable) {
				t.Fatalf("Acquire after the outcome: %v", err)
			} else if err == nil {
				permit.Complete(breaker.Neutral)
			}
		})
	}
}

// A version or generation that the next write would wrap to zero is refused when read,
// rather than advanced into a record that no replica accepts.
func TestVersionsNearTheMaximumAreRefusedOnRead(t *testing.T) {
	for _, r := range []sharedstate.Record{
		{Version: math.MaxUint64, Generation: 1},
		{Version: 1, Generation: math.MaxUint64},
	} {
		r.Fingerprint = "fp"
		if err := r.Check("kafka:orders"); !errors.Is(err, sharedstate.ErrCorrupt) {
			t.Errorf("Check of version %d, generation %d: %v; want ErrCorrupt", r.Version, r.Generation, err)
		}
	}
}
