package dynamo

import (
	"errors"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/backend"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

func TestUnreachableTableServesAFreshClosedSnapshotThenRefuses(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	c := f.r[0]
	mustAcquire(t, c).Complete(breaker.Success)
	f.st.setDown(errDown)
	loads := func() int { return f.st.count("load") }
	base := loads()

	f.clk.Advance(800 * time.Millisecond) // the refresh fails; the snapshot is still fresh
	mustAcquire(t, c).Complete(breaker.Success)
	if got := loads() - base; got != 1 {
		t.Fatalf("%d loads; want 1 refresh attempt", got)
	}
	f.clk.Advance(199 * time.Millisecond)
	for range 10 {
		mustAcquire(t, c).Complete(breaker.Success)
	}
	if got := loads() - base; got != 1 {
		t.Fatalf("%d loads within RetryDelay; want still 1", got)
	}
	f.clk.Advance(time.Millisecond) // stale: refused, and no new attempt before the delay
	for range 10 {
		ue := mustUnavailable(t, c)
		if !errors.Is(ue, errDown) {
			t.Fatalf("UnavailableError cause = %v; want the table's error", ue.Err)
		}
	}
	if got := loads() - base; got != 1 {
		t.Fatalf("%d loads; want still 1 within RetryDelay", got)
	}
	// After RetryDelay the next call that needs the table tries again.
	f.clk.Advance(800 * time.Millisecond)
	mustUnavailable(t, c)
	if got := loads() - base; got != 2 {
		t.Fatalf("%d loads after RetryDelay; want 2", got)
	}
	f.st.setDown(nil)
	f.clk.Advance(time.Second)
	mustAcquire(t, c).Complete(breaker.Success)
	if s := c.Snapshot(); s.State != breaker.Closed {
		t.Fatalf("after recovery Snapshot = %+v; want closed", s)
	}
}

func TestOutcomesAreDroppedWhileTheTableIsUnreachable(t *testing.T) {
	for _, fault := range []struct {
		name  string
		apply func(*memStore)
	}{
		{"refused", func(m *memStore) { m.setDown(errDown) }},
		// Complete bounds its writes with the I/O timeout; a table that does not
		// answer within it has failed just as one that refuses.
		{"timed out", func(m *memStore) { m.setHang(true) }},
	} {
		t.Run(fault.name, func(t *testing.T) {
			// Under FailClosed; KeepLocal keeps them (TestRefusedWritesKeepLocalEvidence).
			// The I/O timeout ends the hung write, and also bounds the healthy calls
			// before it: 50ms is a scheduling hiccup on a loaded machine.
			f := newFleet(t, 1, sharedPolicy(), sharedstate.WithIOTimeout(time.Second), sharedstate.WithStoreFailure(sharedstate.FailClosed))
			c := f.r[0]
			p1, p2 := mustAcquire(t, c), mustAcquire(t, c)
			fault.apply(f.st)
			if p1.Complete(breaker.Failure) {
				t.Fatal("Complete(Failure) that could not be written = true; want false")
			}
			writes := f.st.count("addFailure")
			if p2.Complete(breaker.Failure) {
				t.Fatal("Complete(Failure) within RetryDelay = true; want false")
			}
			if got := f.st.count("addFailure"); got != writes {
				t.Fatalf("a write was attempted within RetryDelay (%d, was %d)", got, writes)
			}
		})
	}
}

// The refusal of another policy names the field that differs, not two hashes, and
// replicas that differ only in a per-process field (MaxInFlight) share the circuit.
func TestFingerprintMismatchNamesTheField(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	mustAcquire(t, f.r[0]).Complete(breaker.Success)
	other := sharedPolicy()
	other.FailureThreshold = 5
	c := f.replica(other)
	ue := mustUnavailable(t, c)
	var pm *sharedstate.PolicyMismatchError
	if !errors.Is(ue, ErrFingerprintMismatch) || !errors.As(ue, &pm) {
		t.Fatalf("error = %v; want a *sharedstate.PolicyMismatchError", ue)
	}
	if len(pm.Fields) != 1 || !strings.HasPrefix(pm.Fields[0], "FailureThreshold: stored 3, ours 5") {
		t.Fatalf("differing fields = %q; want FailureThreshold only, stored 3 and ours 5", pm.Fields)
	}
	if msg := ue.Error(); !strings.Contains(msg, "FailureThreshold") || !strings.HasPrefix(msg, "dynamo: ") {
		t.Fatalf("message %q does not name the field", msg)
	}
	if err := c.Refresh(t.Context()); !errors.Is(err, ErrFingerprintMismatch) {
		t.Fatalf("Refresh = %v; want the mismatch", err)
	}
	stored, _ := sharedstate.Fingerprint(sharedPolicy())
	if it := f.item(); it.Fingerprint != stored {
		t.Fatalf("the refused replica changed the item's fingerprint to %s", it.Fingerprint)
	}
	perProcess := sharedPolicy()
	perProcess.MaxInFlight = 7 // documented as per process
	mustAcquire(t, f.replica(perProcess)).Complete(breaker.Success)
}

func TestCorruptItemFailsClosed(t *testing.T) {
	good := sharedstate.Record{Version: 3, Fingerprint: testFingerprint(), State: breaker.Closed, Generation: 2}
	tests := []struct {
		name  string
		edit  func(map[string]types.AttributeValue)
		field string
	}{
		{"unknown state", func(m map[string]types.AttributeValue) { m[attrState] = str("ajar") }, attrState},
		{"generation of the wrong type", func(m map[string]types.AttributeValue) { m[attrGeneration] = str("2") }, attrGeneration},
		{"missing fingerprint", func(m map[string]types.AttributeValue) { delete(m, attrFingerprint) }, attrFingerprint},
		{"negative failures", func(m map[string]types.AttributeValue) { m[attrFailures] = num(-1) }, attrFailures},
		{"lease that is not a map", func(m map[string]types.AttributeValue) {
			m[attrState] = str("half-open")
			m[attrLeases] = &types.AttributeValueMemberL{Value: []types.AttributeValue{str("x")}}
		}, "leases[0]"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newFleet(t, 1, sharedPolicy())
			attrs := encode(testID, good)
			tt.edit(attrs)
			f.st.raw(testID, attrs)
			ue := mustUnavailable(t, f.r[0])
			var ie *ItemError
			if !errors.Is(ue, ErrCorruptItem) || !errors.As(ue, &ie) {
				t.Fatalf("error = %v; want an *ItemError", ue)
			}
			if ie.Field != tt.field || ie.Identity != testID {
				t.Fatalf("ItemError names %q of %q; want %q of %q", ie.Field, ie.Identity, tt.field, testID)
			}
			// Repairing the item (here: deleting it) brings the circuit back.
			f.st.raw(testID, nil)
			f.clk.Advance(time.Second)
			mustAcquire(t, f.r[0]).Complete(breaker.Success)
		})
	}
}

func TestNewRefusesWhatItCannotProvide(t *testing.T) {
	withScope := func(s breaker.Scope) breaker.Policy { p := sharedPolicy(); p.Scope = s; return p }
	window := sharedPolicy()
	window.FailureWindow = time.Minute
	invalid := sharedPolicy()
	invalid.BreakDuration = 0
	shadow := sharedPolicy()
	shadow.Mode = breaker.Shadow
	tests := []struct {
		name  string
		p     breaker.Policy
		field string
	}{
		{"local process", withScope(breaker.LocalProcess), "Scope"},
		{"single host", withScope(breaker.SingleHost), "Scope"},
		{"window mode", window, "FailureWindow"},
		{"shadow mode", shadow, "Mode"},
		{"invalid policy", invalid, "BreakDuration"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := newCircuit(newMemStore(), testTable, testID, tt.p)
			var pe *breaker.PolicyError
			if !errors.As(err, new(*breaker.PolicyError)) || !errors.As(err, &pe) || pe.Field != tt.field {
				t.Fatalf("newCircuit = %v; want a *breaker.PolicyError for %s", err, tt.field)
			}
			if !strings.HasPrefix(err.Error(), "dynamo: ") {
				t.Fatalf("error %q does not start with the package name", err)
			}
		})
	}
	for _, tt := range []struct {
		name, identity string
		opts           []Option
	}{
		{"negative staleness", testID, []Option{sharedstate.WithMaxStaleness(-time.Second)}},
		{"nil option", testID, []Option{nil}},
		{"negative retry delay", testID, []Option{sharedstate.WithRetryDelay(-time.Second)}},
		{"zero I/O timeout", testID, []Option{sharedstate.WithIOTimeout(0)}},
		{"nil clock", testID, []Option{sharedstate.WithClock(nil)}},
		{"nil random", testID, []Option{sharedstate.WithRandom(nil)}},
		{"empty identity", "", nil},
	} {
		if _, err := newCircuit(newMemStore(), testTable, tt.identity, sharedPolicy(), tt.opts...); err == nil {
			t.Errorf("%s: newCircuit succeeded; want an error", tt.name)
		}
	}
	if _, err := New(nil, testTable, testID, sharedPolicy()); err == nil {
		t.Error("New(nil client) succeeded; want an error")
	}
}

func TestDeletedItemStartsClosedAgain(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	f.open()
	f.st.raw(testID, nil)
	f.clk.Set(t0.Add(time.Minute))
	mustAcquire(t, f.r[0]).Complete(breaker.Success)
	// Created again a minute later, it starts from the clock: no snapshot or permit of
	// the deleted item can match it.
	if it := f.item(); it.State != breaker.Closed || it.Generation != uint64(t0.Add(time.Minute).UnixNano()) || it.Version <= gen0+10 {
		t.Fatalf("item = %+v; want a new closed item whose version and generation start at the clock", it)
	}
}

func TestNoWriteIsTriedWithinRetryDelay(t *testing.T) {
	// A snapshot that stays fresh past the open deadline: the next Acquire must write
	// HALF-OPEN, and the table is down.
	f := newFleet(t, 1, sharedPolicy(), sharedstate.WithMaxStaleness(time.Minute), sharedstate.WithStoreFailure(sharedstate.FailClosed))
	c := f.r[0]
	f.clk.Set(f.open())
	f.st.setDown(errDown)
	puts := func() int { return f.st.count("put") }
	mustUnavailable(t, c)
	base := puts()
	for range 10 {
		if ue := mustUnavailable(t, c); !errors.Is(ue, errDown) {
			t.Fatalf("UnavailableError cause = %v; want the table's error", ue.Err)
		}
	}
	if got := puts() - base; got != 0 {
		t.Fatalf("%d writes tried within RetryDelay of a failed one; want 0", got)
	}
	f.clk.Advance(time.Second)
	mustUnavailable(t, c)
	if got := puts() - base; got != 1 {
		t.Fatalf("%d writes after RetryDelay; want 1", got)
	}
	f.st.setDown(nil)
	f.clk.Advance(time.Second)
	if p := mustAcquire(t, c); !p.Probe() || !p.Complete(breaker.Success) {
		t.Fatal("after recovery: want a probe whose success closes the circuit")
	}
}

// A permit of the deleted item must not count against the item created after it,
// even when both would otherwise be in their first generation.
func TestPermitFromBeforeADeletionIsStale(t *testing.T) {
	f := newFleet(t, 2, sharedPolicy())
	old := mustAcquire(t, f.r[0])                    // generation gen0 of the first item
	f.st.raw(testID, nil)                            // an operator deletes the item
	f.clk.Advance(time.Minute)                       // every snapshot is stale
	mustAcquire(t, f.r[1]).Complete(breaker.Success) // creates the item again
	if old.Complete(breaker.Failure) {
		t.Fatal("a permit of the deleted item counted against the new one")
	}
	if it := f.item(); it.Failures != 0 {
		t.Fatalf("item = %+v; want no failures", it)
	}
}

// The caller that refreshes a three-quarters-stale snapshot may wait
// for the table up to its I/O timeout. If the refresh fails and the wait made the
// snapshot older than MaxStaleness, the caller is refused rather than admitted
// on the time it read before waiting.
func TestFailedRefreshThatOutlivedTheSnapshotRefuses(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	c := f.r[0]
	mustAcquire(t, c).Complete(breaker.Success)
	f.clk.Advance(800 * time.Millisecond) // three quarters stale: the next caller refreshes
	f.st.setDown(errDown)
	f.st.onRequest = func(string) { f.clk.Advance(2 * time.Second) } // the read takes the whole I/O timeout
	p, err := c.Acquire(t.Context())
	if err == nil {
		p.Complete(breaker.Neutral)
		t.Fatalf("admitted on a snapshot %v old after a failed refresh; want ErrUnavailable", f.clk.Now().Sub(t0))
	}
	if !errors.Is(err, breaker.ErrUnavailable) {
		t.Fatalf("Acquire = %v; want ErrUnavailable", err)
	}
}

// Items written before the shared engine carry breaker.Policy.Fingerprint. A rolling
// upgrade must not refuse them: the engine accepts that fingerprint of its own policy,
// keeps it, and counts on it.
func TestItemWithThePreviousFingerprintIsAccepted(t *testing.T) {
	f := newFleet(t, 1, sharedPolicy())
	legacy := sharedstate.Record{Version: 4, Fingerprint: backend.Fingerprint(sharedPolicy()), State: breaker.Closed, Generation: 2}
	f.st.raw(testID, encode(testID, legacy))
	fail(t, f.r[0], 3)
	if it := f.item(); it.State != breaker.Open || it.Fingerprint != legacy.Fingerprint {
		t.Fatalf("item = %+v; want opened by three failures, with the fingerprint kept", it)
	}
}

// WithErrorHandler is told the write Permit.Complete could not make: a failure the
// table refused to count.
func TestErrorHandlerHearsTheWritesCompleteCannotReturn(t *testing.T) {
	var mu sync.Mutex
	var heard []error
	f := newFleet(t, 1, sharedPolicy(), sharedstate.WithErrorHandler(func(err error) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, err)
	}))
	p := mustAcquire(t, f.r[0]) // reads the item while the table answers
	refused := errors.New("throttled")
	f.st.mu.Lock()
	f.st.refuse = refused
	f.st.mu.Unlock()
	p.Complete(breaker.Failure)
	mu.Lock()
	defer mu.Unlock()
	if len(heard) == 0 || !errors.Is(heard[0], refused) {
		t.Fatalf("error handler heard %v; want the refused write (%v)", heard, refused)
	}
}
