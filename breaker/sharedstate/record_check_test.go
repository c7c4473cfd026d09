package sharedstate_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// esGoodRecord returns a valid closed record that each case of the Check tables
// changes in one field.
func esGoodRecord() sharedstate.Record {
	return sharedstate.Record{Version: 5, Fingerprint: "fp", State: breaker.Closed, Generation: 5, Since: 1}
}

// esLeases returns n leases with distinct non-zero IDs.
func esLeases(n int) []sharedstate.Lease {
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
		{"leases while closed", "Leases", func(r *sharedstate.Record) { r.Leases = esLeases(1) }},
		{"leases while open", "Leases", func(r *sharedstate.Record) { r.State, r.OpenUntil, r.Leases = breaker.Open, 9, esLeases(1) }},
		{"too many leases", "Leases", func(r *sharedstate.Record) { r.State, r.Leases = breaker.HalfOpen, esLeases(sharedstate.MaxLeases+1) }},
		{"negative unhealthy since", "UnhealthySince", func(r *sharedstate.Record) { r.UnhealthySince = -1 }},
		{"negative last error at", "UnhealthySince", func(r *sharedstate.Record) { r.LastErrorAt = -1 }},
		{"long last error", "LastError", func(r *sharedstate.Record) { r.LastError = strings.Repeat("x", breaker.MaxErrorText+1) }},
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
		r := esGoodRecord()
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
		{"half-open with the most leases", func(r *sharedstate.Record) { r.State, r.Leases = breaker.HalfOpen, esLeases(sharedstate.MaxLeases) }},
		{"open at the first instant", func(r *sharedstate.Record) { r.State, r.OpenUntil = breaker.Open, 1 }},
		{"counts set", func(r *sharedstate.Record) { r.Failures, r.FailedProbes, r.Successes = 1, 1, 1 }},
		{"times at zero and set", func(r *sharedstate.Record) { r.UnhealthySince, r.LastErrorAt = 0, 1 }},
		{"last error at the limit", func(r *sharedstate.Record) { r.LastError = strings.Repeat("x", breaker.MaxErrorText) }},
		{"forced closed", func(r *sharedstate.Record) { r.Override, r.OverrideUntil = breaker.ForcedClosed, 1 }},
		{"forced open", func(r *sharedstate.Record) {
			r.State, r.OpenUntil, r.Override, r.OverrideUntil = breaker.Open, 1, breaker.ForcedOpen, 1
		}},
	}
	for _, tc := range good {
		r := esGoodRecord()
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
