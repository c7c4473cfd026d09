package circuittest

import (
	"context"
	"errors"
	"maps"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// TestDriver checks a sharedstate.Driver against its contract: missing records, the
// conditional replace (exactly one of several concurrent writers wins), every Record
// field stored and read back, when the driver is a sharedstate.Counter the
// conditions of its counter updates, and when it is a sharedstate.Lister its listing. newDriver returns a driver on a fresh, empty
// store each time it is called.
func TestDriver(t *testing.T, newDriver func(t *testing.T) sharedstate.Driver) {
	ctx := context.Background()
	t.Run("MissingRecord", func(t *testing.T) {
		if _, err := newDriver(t).Load(ctx, "a"); !errors.Is(err, sharedstate.ErrNotFound) {
			t.Fatalf("Load of a missing record = %v; want ErrNotFound", err)
		}
	})
	t.Run("EveryFieldRoundTrips", func(t *testing.T) {
		d := newDriver(t)
		for i, want := range SampleRecords() {
			id := "a" + strconv.Itoa(i)
			if err := d.Replace(ctx, id, 0, want); err != nil {
				t.Fatal(err)
			}
			got, err := d.Load(ctx, id)
			if err != nil {
				t.Fatal(err)
			}
			for _, name := range sharedstate.RecordFields() {
				g, w := reflect.ValueOf(got).FieldByName(name), reflect.ValueOf(want).FieldByName(name)
				if !reflect.DeepEqual(g.Interface(), w.Interface()) {
					t.Errorf("Record.%s: stored %v, read back %v", name, w.Interface(), g.Interface())
				}
			}
		}
	})
	t.Run("ConditionalReplace", func(t *testing.T) {
		d := newDriver(t)
		r := SampleRecords()[0]
		r.Leases, r.State = nil, breaker.Closed
		if err := d.Replace(ctx, "a", 0, r); err != nil {
			t.Fatal(err)
		}
		if err := d.Replace(ctx, "a", 0, r); !errors.Is(err, sharedstate.ErrConflict) {
			t.Fatalf("creating a record that exists = %v; want ErrConflict", err)
		}
		next := r
		next.Version, next.Failures = r.Version+1, 99
		if err := d.Replace(ctx, "a", r.Version-1, next); !errors.Is(err, sharedstate.ErrConflict) {
			t.Fatalf("Replace on a stale version = %v; want ErrConflict", err)
		}
		if got, _ := d.Load(ctx, "a"); got.Failures != r.Failures {
			t.Fatalf("a refused Replace wrote: failures %d", got.Failures)
		}
		if _, err := d.Load(ctx, "b"); !errors.Is(err, sharedstate.ErrNotFound) {
			t.Fatalf("another identity's record = %v; want ErrNotFound", err)
		}
		// Many writers on one version: exactly one wins.
		var wins atomic.Int32
		var wg sync.WaitGroup
		for i := range 8 {
			wg.Go(func() {
				n := r
				n.Version, n.Failures = r.Version+1, int64(i)
				if err := d.Replace(ctx, "a", r.Version, n); err == nil {
					wins.Add(1)
				} else if !errors.Is(err, sharedstate.ErrConflict) {
					t.Error(err)
				}
			})
		}
		wg.Wait()
		if wins.Load() != 1 {
			t.Fatalf("%d of 8 concurrent replaces of one version won; want 1", wins.Load())
		}
	})
	if _, ok := newDriver(t).(sharedstate.Counter); ok {
		t.Run("Counter", func(t *testing.T) { testCounter(t, newDriver(t)) })
	}
	if _, ok := newDriver(t).(sharedstate.Lister); ok {
		t.Run("Lister", func(t *testing.T) { testLister(t, newDriver(t)) })
	}
}

// testLister stores records under identities with and without a common prefix, and
// checks that List names each one under the prefix once, stops when yield fails,
// and names nothing in an empty listing.
func testLister(t *testing.T, d sharedstate.Driver) {
	ctx := context.Background()
	l := d.(sharedstate.Lister)
	list := func(prefix string) []string {
		t.Helper()
		var ids []string
		if err := l.List(ctx, prefix, func(id string) error { ids = append(ids, id); return nil }); err != nil {
			t.Fatalf("List(%q): %v", prefix, err)
		}
		slices.Sort(ids)
		return ids
	}
	if ids := list(""); len(ids) != 0 {
		t.Fatalf("List of an empty store = %q", ids)
	}
	r := SampleRecords()[0]
	r.Leases, r.State = nil, breaker.Closed
	// More than a page of most drivers; identities as a registry with an identity
	// prefix names them, in characters every backend accepts.
	var want []string
	for i := range 120 {
		id := "alpha.kafka:topic-" + strconv.Itoa(i)
		want = append(want, id)
		if err := d.Replace(ctx, id, 0, r); err != nil {
			t.Fatal(err)
		}
	}
	for _, other := range []string{"beta.kafka:topic-1", "kafka:orders"} {
		if err := d.Replace(ctx, other, 0, r); err != nil {
			t.Fatal(err)
		}
	}
	slices.Sort(want)
	if got := list("alpha."); !slices.Equal(got, want) {
		t.Fatalf("List(\"alpha.\") named %d identities, want %d:\n%q", len(got), len(want), got)
	}
	if got := list(""); len(got) != len(want)+2 || !slices.Contains(got, "kafka:orders") {
		t.Fatalf("List(\"\") named %q", got)
	}
	stop := errors.New("enough")
	n := 0
	err := l.List(ctx, "", func(string) error { n++; return stop })
	if !errors.Is(err, stop) || n != 1 {
		t.Fatalf("List whose yield fails = %v after %d calls; want the yield's error after 1", err, n)
	}
}

func testCounter(t *testing.T, d sharedstate.Driver) {
	ctx := context.Background()
	c := d.(sharedstate.Counter)
	r := SampleRecords()[0]
	r.State, r.Failures, r.Leases = breaker.Closed, 0, nil
	if err := d.Replace(ctx, "a", 0, r); err != nil {
		t.Fatal(err)
	}
	cond := sharedstate.Closed{Generation: r.Generation, Fingerprint: r.Fingerprint, Limit: 2}
	conflict := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, sharedstate.ErrConflict) {
			t.Fatalf("%s = %v; want ErrConflict", what, err)
		}
	}
	_, err := c.ResetFailures(ctx, "a", cond)
	conflict("ResetFailures with nothing to reset", err)
	wrongGen := cond
	wrongGen.Generation++
	_, err = c.AddFailure(ctx, "a", wrongGen)
	conflict("AddFailure of another generation", err)
	wrongFP := cond
	wrongFP.Fingerprint += "x"
	_, err = c.AddFailure(ctx, "a", wrongFP)
	conflict("AddFailure under another fingerprint", err)
	_, err = c.AddFailure(ctx, "b", cond)
	conflict("AddFailure of a missing record", err)
	got, err := c.AddFailure(ctx, "a", cond)
	if err != nil || got.Failures != 1 || got.Version != r.Version+1 || got.Fingerprint != r.Fingerprint {
		t.Fatalf("AddFailure = %+v, %v; want failures 1 at version %d", got, err, r.Version+1)
	}
	if got, err = c.ResetFailures(ctx, "a", cond); err != nil || got.Failures != 0 || got.Version != r.Version+2 {
		t.Fatalf("ResetFailures = %+v, %v; want failures 0 at version %d", got, err, r.Version+2)
	}
	c.AddFailure(ctx, "a", cond)
	if got, err = c.AddFailure(ctx, "a", cond); err != nil || got.Failures != 2 {
		t.Fatalf("AddFailure to the limit = %+v, %v", got, err)
	}
	_, err = c.AddFailure(ctx, "a", cond)
	conflict("AddFailure at the limit", err)
	_, err = c.ResetFailures(ctx, "a", cond)
	conflict("ResetFailures at the limit (the threshold must stand until OPEN is written)", err)
	held := got
	held.Version, held.Failures, held.Override, held.OverrideUntil = got.Version+1, 0, breaker.ForcedClosed, 1
	if err := d.Replace(ctx, "a", got.Version, held); err != nil {
		t.Fatal(err)
	}
	_, err = c.AddFailure(ctx, "a", cond)
	conflict("AddFailure under an override", err)
}

// SampleRecords returns valid records that between them set every Record field to a
// value other than its zero value, for driver tests. It panics if Record has gained a
// field none of them sets, so that driver tests are updated with the record.
func SampleRecords() []sharedstate.Record {
	halfOpen := sharedstate.Record{
		Version: 1<<62 + 7, Fingerprint: "0123456789abcdef0123456789abcdef", Policy: "FailureThreshold=3 BreakDuration=10s",
		State: breaker.HalfOpen, Generation: 1<<61 + 3, Failures: 4, FailedProbes: 2, Successes: 1,
		Leases: []sharedstate.Lease{{ID: 1<<63 + 5, Owner: "host/1/ab", Expires: 1<<60 + 13}, {ID: 9, Owner: "b", Expires: 17}},
		Reason: breaker.ReasonBreakElapsed, Since: 1<<60 + 23,
		LastError: "kafka: LEADER_NOT_AVAILABLE (\"payments\" 3)", LastErrorAt: 1<<60 + 19, UnhealthySince: 1<<60 + 17,
	}
	forcedOpen := halfOpen
	forcedOpen.State, forcedOpen.Leases, forcedOpen.Successes = breaker.Open, nil, 0
	forcedOpen.OpenUntil, forcedOpen.Override, forcedOpen.OverrideUntil = 1<<60+11, breaker.ForcedOpen, 1<<60+11
	forcedOpen.Reason = breaker.ReasonForcedOpen
	samples := []sharedstate.Record{halfOpen, forcedOpen}
	for i := range reflect.TypeFor[sharedstate.Record]().NumField() {
		set := false
		for _, r := range samples {
			set = set || !reflect.ValueOf(r).Field(i).IsZero()
		}
		if !set {
			panic("circuittest: SampleRecords does not set Record." + reflect.TypeFor[sharedstate.Record]().Field(i).Name)
		}
	}
	return samples
}

// MemoryDriver is a sharedstate.Driver, Counter and Lister kept in memory, for
// tests of the engine and of code that uses shared circuits. The zero MemoryDriver is
// empty and ready. Down makes every request fail with the error given, as an
// unreachable store.
type MemoryDriver struct {
	mu      sync.Mutex
	records map[string]sharedstate.Record
	down    error
	refuse  error // writes only
}

// RefuseWrites makes every later write fail with err while reads still answer, as a
// store that is full or read-only (nil: take writes again).
func (m *MemoryDriver) RefuseWrites(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.refuse = err
}

// Forget removes every record, as a store restarted without persistence.
func (m *MemoryDriver) Forget() {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.records = nil
}

// Set stores r as the record of id unconditionally, as a backup restored or a hand
// edit would.
func (m *MemoryDriver) Set(id string, r sharedstate.Record) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.records == nil {
		m.records = map[string]sharedstate.Record{}
	}
	m.records[id] = clone(r)
}

var (
	_ sharedstate.Driver  = (*MemoryDriver)(nil)
	_ sharedstate.Counter = (*MemoryDriver)(nil)
	_ sharedstate.Lister  = (*MemoryDriver)(nil)
)

// Down makes every later request fail with err (nil: answer again).
func (m *MemoryDriver) Down(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = err
}

// Load implements sharedstate.Driver.
func (m *MemoryDriver) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return sharedstate.Record{}, err
	}
	r, ok := m.records[id]
	if !ok {
		return sharedstate.Record{}, sharedstate.ErrNotFound
	}
	return clone(r), nil
}

// Replace implements sharedstate.Driver.
func (m *MemoryDriver) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return err
	}
	if m.refuse != nil {
		return m.refuse
	}
	cur, ok := m.records[id]
	if ok != (expect != 0) || ok && cur.Version != expect {
		return sharedstate.ErrConflict
	}
	if m.records == nil {
		m.records = map[string]sharedstate.Record{}
	}
	m.records[id] = clone(next)
	return nil
}

// List implements sharedstate.Lister, in the order of the identities.
func (m *MemoryDriver) List(ctx context.Context, prefix string, yield func(id string) error) error {
	m.mu.Lock()
	err := m.begin(ctx)
	ids := slices.Sorted(maps.Keys(m.records))
	m.mu.Unlock()
	if err != nil {
		return err
	}
	for _, id := range ids {
		if strings.HasPrefix(id, prefix) {
			if err := yield(id); err != nil {
				return err
			}
		}
	}
	return nil
}

// AddFailure implements sharedstate.Counter.
func (m *MemoryDriver) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return m.update(ctx, id, c, func(r *sharedstate.Record) bool { r.Failures++; return true })
}

// ResetFailures implements sharedstate.Counter.
func (m *MemoryDriver) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return m.update(ctx, id, c, func(r *sharedstate.Record) bool {
		if r.Failures == 0 {
			return false
		}
		r.Failures = 0
		return true
	})
}

func (m *MemoryDriver) update(ctx context.Context, id string, c sharedstate.Closed, f func(*sharedstate.Record) bool) (sharedstate.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx); err != nil {
		return sharedstate.Record{}, err
	}
	if m.refuse != nil {
		return sharedstate.Record{}, m.refuse
	}
	r, ok := m.records[id]
	if !ok || !c.Matches(r) || r.Failures >= c.Limit || !f(&r) {
		return sharedstate.Record{}, sharedstate.ErrConflict
	}
	r.Version++
	m.records[id] = r
	return clone(r), nil
}

func (m *MemoryDriver) begin(ctx context.Context) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.down
}

func clone(r sharedstate.Record) sharedstate.Record {
	r.Leases = append([]sharedstate.Lease(nil), r.Leases...)
	return r
}
