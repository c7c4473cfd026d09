package sharedstate_test

// How old a snapshot may be and still decide (circuit.go: RefreshIfStale, Acquire's
// fast path, the soft refresh, the hard refresh), tested at the exact boundaries with
// a fake clock: MaxStaleness 1 s, so one caller refreshes softly from 750 ms on.

import (
	"context"
	"errors"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/circuittest"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
)

// RefreshIfStale reads the record only when the snapshot is missing, MaxStaleness
// old or older, or from a clock that stepped back.
func TestRefreshIfStaleReadsOnlyAStaleSnapshot(t *testing.T) {
	for _, tc := range []struct {
		name string
		age  time.Duration
		read bool
	}{
		{"just read", 0, false},
		{"a nanosecond short of MaxStaleness", time.Second - 1, false},
		{"exactly MaxStaleness", time.Second, true},
		{"older", 2 * time.Second, true},
		{"the clock stepped back", -1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newCounting()
			c := agedCircuit(t, d, clock, nil)
			clock.Advance(time.Hour) // the snapshot is read well after the circuit was made
			if err := c.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(tc.age)
			if err := c.RefreshIfStale(context.Background()); err != nil {
				t.Fatal(err)
			}
			if got := d.count("load") == 2; got != tc.read {
				t.Fatalf("snapshot %v old: read again %v; want %v", tc.age, got, tc.read)
			}
		})
	}
	d := newCounting()
	c := agedCircuit(t, d, fakeclock.New(rulesT0), nil)
	if err := c.RefreshIfStale(context.Background()); err != nil || d.count("load") != 1 {
		t.Fatalf("no snapshot yet: err %v, %d reads; want the record read", err, d.count("load"))
	}
}

// Forget drops the snapshot and the failure being waited out: the next call reads the
// store at once instead of failing with the cached error.
func TestForgetDropsTheSnapshotAndTheRetryDelay(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := freshCircuit(t, d, clock, nil)
	d.Down(errDown)
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("Refresh with the store down: %v", err)
	}
	d.Down(nil)
	loads := d.count("load")
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) || d.count("load") != loads {
		t.Fatalf("within RetryDelay: %v after %d reads; want the cached failure, no read", err, d.count("load")-loads)
	}
	c.Forget()
	if s := c.Snapshot(); s.Generation != 0 {
		t.Fatalf("Snapshot after Forget: generation %d; want 0 (no snapshot)", s.Generation)
	}
	if err := c.Refresh(context.Background()); err != nil || d.count("load") != loads+1 {
		t.Fatalf("after Forget: %v after %d reads; want one successful read", err, d.count("load")-loads)
	}
}

// A closed snapshot admits without I/O until three quarters of MaxStaleness; from
// then on one caller reads the record (a soft refresh) and the call is still admitted.
func TestFastPathRefreshesSoftlyFromThreeQuarters(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := freshCircuit(t, d, clock, nil)
	clock.Advance(750*time.Millisecond - 1)
	if ok, err := acquireNeutral(c); !ok || d.count("load") != 1 {
		t.Fatalf("at 750ms-1ns: admitted %v (%v), %d reads; want admitted on the snapshot", ok, err, d.count("load"))
	}
	clock.Advance(1)
	if ok, err := acquireNeutral(c); !ok || d.count("load") != 2 {
		t.Fatalf("at 750ms: admitted %v (%v), %d reads; want admitted after a second read", ok, err, d.count("load"))
	}
}

// An open snapshot rejects without I/O until three quarters of MaxStaleness, then
// one caller reads the record, which may have closed meanwhile.
func TestOpenSnapshotIsReadAgainFromThreeQuarters(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := agedCircuit(t, d, clock, nil)
	tripCircuit(t, c)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("after 3 failures: %v; want open", err)
	}
	// Another replica's operator closes it; this replica's snapshot still says open.
	other := ruleCircuit(t, d, clock, nil)
	if err := other.ForceClose(context.Background(), clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	loads := d.count("load")
	clock.Advance(750*time.Millisecond - 1)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) || d.count("load") != loads {
		t.Fatalf("open snapshot at 750ms-1ns: %v after %d reads; want rejected without a read", err, d.count("load")-loads)
	}
	clock.Advance(1)
	if ok, err := acquireNeutral(c); !ok || d.count("load") != loads+1 {
		t.Fatalf("open snapshot at 750ms, record closed: admitted %v (%v) after %d reads; want one read and admitted", ok, err, d.count("load")-loads)
	}
}

// With the store down, a closed snapshot younger than MaxStaleness still admits (the
// soft refresh's failure is not the caller's); at MaxStaleness it does not, and the
// call reads the record once (RetryDelay < 0, so nothing holds a second read back).
func TestStoreDownAdmitsUntilExactlyMaxStaleness(t *testing.T) {
	for _, tc := range []struct {
		age   time.Duration
		admit bool
	}{{time.Second - 1, true}, {time.Second, false}} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		c := freshCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = -1 })
		d.Down(errDown)
		clock.Advance(tc.age)
		loads := d.count("load")
		ok, err := acquireNeutral(c)
		if ok != tc.admit || !ok && !errors.Is(err, breaker.ErrUnavailable) {
			t.Fatalf("snapshot %v old, store down: admitted %v (%v); want %v", tc.age, ok, err, tc.admit)
		}
		if got := d.count("load") - loads; got != 1 {
			t.Fatalf("snapshot %v old, store down: %d reads; want 1", tc.age, got)
		}
	}
}

// A soft refresh whose read ends exactly at a deadline of the snapshot decides on
// the record at that time: a ForceClose that ended is written closed, and a break
// that ended lets the caller probe.
func TestSoftRefreshEndingAtADeadline(t *testing.T) {
	for _, tc := range []struct {
		name  string
		start func(c *sharedstate.Circuit, clock *fakeclock.Clock) time.Time // returns the deadline
		want  breaker.State
	}{
		{"ForceClose", func(c *sharedstate.Circuit, clock *fakeclock.Clock) time.Time {
			until := clock.Now().Add(time.Minute)
			if err := c.ForceClose(context.Background(), until); err != nil {
				t.Fatal(err)
			}
			return until
		}, breaker.Closed},
		{"break", func(c *sharedstate.Circuit, clock *fakeclock.Clock) time.Time {
			tripCircuit(t, c)
			return clock.Now().Add(time.Minute)
		}, breaker.HalfOpen},
	} {
		t.Run(tc.name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newHookedDriver()
			c := agedCircuit(t, d, clock, nil)
			deadline := tc.start(c, clock)
			clock.Set(deadline.Add(-800 * time.Millisecond))
			if err := c.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(790 * time.Millisecond) // a soft refresh, 10ms before the deadline
			d.onLoad = func() {
				d.onLoad = nil
				clock.Set(deadline)
			}
			p, err := c.Acquire(context.Background())
			if err != nil {
				t.Fatalf("soft refresh ending at the %s's deadline: %v", tc.name, err)
			}
			p.Complete(breaker.Neutral)
			if r := storedRecord(t, d.MemoryDriver); r.State != tc.want || r.Override != breaker.NoOverride {
				t.Fatalf("stored %+v; want %v without override", r, tc.want)
			}
		})
	}
}

// A soft refresh during which the clock stepped back leaves a snapshot of unknown
// age: the record is read again before a call is admitted on it.
func TestSoftRefreshUnderAClockSteppingBackReadsAgain(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := freshCircuit(t, d, clock, nil)
	clock.Advance(800 * time.Millisecond)
	d.onLoad = func() {
		d.onLoad = nil
		clock.Advance(-time.Second)
	}
	loads := d.count("load")
	if ok, err := acquireNeutral(c); !ok {
		t.Fatal(err)
	}
	if got := d.count("load") - loads; got != 2 {
		t.Fatalf("%d reads; want the soft refresh's and one after the clock stepped back", got)
	}
}

// A soft refresh that ends exactly MaxStaleness after the snapshot was read must not
// admit on it (the boundary of TestSoftRefreshDecidesOnTheClockAfterIt). Ages are
// differences of two readings of the circuit's clock, whatever those readings are: the
// bound holds as well when the snapshot was read an hour before the circuit's creation
// by an injected clock set back (negative readings).
func TestSoftRefreshEndingAtMaxStalenessDoesNotAdmit(t *testing.T) {
	for _, readAt := range []time.Duration{time.Hour, -time.Hour} { // after, before the creation
		for _, tc := range []struct {
			read  time.Duration
			admit bool
		}{{200*time.Millisecond - 1, true}, {200 * time.Millisecond, false}} {
			clock := fakeclock.New(rulesT0)
			d := newCounting()
			c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = -1 })
			clock.Advance(readAt)
			if err := c.Refresh(context.Background()); err != nil {
				t.Fatal(err)
			}
			clock.Advance(800 * time.Millisecond)
			d.onLoad = func() {
				clock.Advance(tc.read)
				d.Down(errDown)
			}
			if ok, err := acquireNeutral(c); ok != tc.admit {
				t.Fatalf("snapshot read at %v from the circuit's creation, soft refresh failing after %v: admitted %v (%v); want %v", readAt, tc.read, ok, err, tc.admit)
			}
		}
	}
}

// An open snapshot whose soft refresh fails keeps rejecting until its deadline, with
// the rejection, not the store's failure.
func TestOpenSnapshotRejectsWhileItsRefreshFails(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.BreakDuration = time.Second })
	tripCircuit(t, c)
	d.Down(errDown)
	clock.Advance(800 * time.Millisecond) // soft refresh, which fails
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("open 800ms of 1s, store down: %v; want the rejection", err)
	}
}

// A stale open snapshot whose read fails still rejects until the open deadline (the
// refusal stands), and from the deadline on the failure is the caller's.
func TestStaleOpenSnapshotRejectsUntilItsDeadline(t *testing.T) {
	for _, tc := range []struct {
		after time.Duration
		open  bool
	}{{2*time.Second - 1, true}, {2 * time.Second, false}} {
		clock := fakeclock.New(rulesT0)
		d := newCounting()
		c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.BreakDuration = 2 * time.Second })
		tripCircuit(t, c)
		d.Down(errDown)
		clock.Advance(tc.after)
		_, err := c.Acquire(context.Background())
		if tc.open && !errors.Is(err, breaker.ErrOpen) || !tc.open && !errors.Is(err, breaker.ErrUnavailable) {
			t.Fatalf("%v after opening for 2s, store down: %v; want open %v", tc.after, err, tc.open)
		}
	}
	// A clock that stepped back does not lift the refusal.
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := agedCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.Policy.BreakDuration = 2 * time.Second })
	tripCircuit(t, c)
	d.Down(errDown)
	clock.Advance(-time.Millisecond)
	if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("clock 1ms back, store down, open: %v; want the rejection", err)
	}
}

// While a failed read is recent, a soft refresh does not read the store again: the
// snapshot decides, and the cached failure stays.
func TestSoftRefreshWaitsOutRetryDelay(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := freshCircuit(t, d, clock, nil)
	d.Down(errDown)
	clock.Advance(100 * time.Millisecond)
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("Refresh with the store down: %v", err)
	}
	d.Down(nil)
	loads := d.count("load")
	clock.Advance(700 * time.Millisecond) // 800ms old: soft refresh, 700ms into RetryDelay
	if ok, err := acquireNeutral(c); !ok || d.count("load") != loads {
		t.Fatalf("admitted %v (%v) after %d reads; want admitted without a read", ok, err, d.count("load")-loads)
	}
	if err := c.Refresh(context.Background()); !errors.Is(err, errDown) {
		t.Fatalf("Refresh within RetryDelay: %v; want the cached failure", err)
	}
}

// An observer added under a key replaces the one added earlier under it.
func TestObserverUnderAKeyReplacesTheEarlierOne(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	c := freshCircuit(t, newCounting(), clock, nil)
	var first, second []breaker.Transition
	c.Observe("registry", func(tr breaker.Transition) { first = append(first, tr) })
	c.Observe("registry", func(tr breaker.Transition) { second = append(second, tr) })
	if err := c.ForceOpen(context.Background(), clock.Now().Add(time.Minute)); err != nil {
		t.Fatal(err)
	}
	if len(first) != 0 || len(second) != 1 || second[0].To != breaker.Open {
		t.Fatalf("replaced observer saw %v, its replacement %v; want nothing and the opening", first, second)
	}
}

// A record that is corrupt or another policy's drops the snapshot: no call is
// admitted on it, however fresh, until the record is mended.
func TestUnusableRecordDropsTheSnapshot(t *testing.T) {
	for name, edit := range map[string]func(*sharedstate.Record){
		"another policy's": func(r *sharedstate.Record) { r.Fingerprint = "another policy" },
		"corrupt":          func(r *sharedstate.Record) { r.State = breaker.State(42) },
	} {
		t.Run(name, func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newHookedDriver()
			c := freshCircuit(t, d, clock, nil)
			editRecord(t, d.MemoryDriver, edit)
			if err := c.Refresh(context.Background()); !errors.Is(err, breaker.ErrUnavailable) {
				t.Fatalf("Refresh of the %s record: %v; want unavailable", name, err)
			}
			if s := c.Snapshot(); s.Generation != 0 {
				t.Fatalf("snapshot kept after reading the %s record: %+v", name, s)
			}
			if ok, err := acquireNeutral(c); ok || !errors.Is(err, breaker.ErrUnavailable) {
				t.Fatalf("call after reading the %s record: admitted %v (%v); want unavailable", name, ok, err)
			}
		})
		// The same when a soft refresh is the read that finds it: the snapshot the
		// caller started with is not used either.
		t.Run(name+" by a soft refresh", func(t *testing.T) {
			clock := fakeclock.New(rulesT0)
			d := newHookedDriver()
			c := freshCircuit(t, d, clock, nil)
			editRecord(t, d.MemoryDriver, edit)
			clock.Advance(800 * time.Millisecond)
			if ok, err := acquireNeutral(c); ok || !errors.Is(err, breaker.ErrUnavailable) {
				t.Fatalf("call whose soft refresh read the %s record: admitted %v (%v); want unavailable", name, ok, err)
			}
		})
	}
}

// A soft refresh that reads a break ending at that very instant (another replica's
// record, moved on since the snapshot) decides on it: the break is over, and the call
// writes HALF-OPEN and takes the probe, as any call at the end of a break.
func TestSoftRefreshReadingABreakEndingNowTakesTheProbe(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	openAt(t, c)
	clock.Advance(30 * time.Second) // the open snapshot is old: the next call reads softly
	editRecord(t, d.MemoryDriver, func(r *sharedstate.Record) { r.OpenUntil = clock.Now().UnixNano() })
	loads := d.count("load")
	p, err := c.Acquire(context.Background())
	if err != nil || !p.Probe() {
		t.Fatalf("Acquire whose soft refresh read a break ending now: probe %v, %v; want the probe", p.Probe(), err)
	}
	p.Complete(breaker.Success)
	if d.count("load") == loads {
		t.Fatal("the call did not read the old snapshot's record")
	}
}

// The soft refresh from three quarters of MaxStaleness does not depend on where the
// clock stands: on a clock stepped back behind the circuit's creation (readings
// before it) one caller reads the record at 750 ms as well.
func TestSoftRefreshBehindTheCircuitsCreation(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	clock.Advance(-time.Hour)
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(750 * time.Millisecond)
	loads := d.count("load")
	if ok, err := acquireNeutral(c); !ok || d.count("load") != loads+1 {
		t.Fatalf("at 750ms: admitted %v (%v), %d reads; want admitted after one more read", ok, err, d.count("load")-loads)
	}
}

// slowAnswer is a driver whose next write, once armed, is applied at once but
// answered only after then has run (time passing, other replicas writing).
type slowAnswer struct {
	*circuittest.MemoryDriver
	mu   sync.Mutex
	then func()
}

func (s *slowAnswer) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	err := s.MemoryDriver.Replace(ctx, id, expect, next)
	s.mu.Lock()
	then := s.then
	s.then = nil
	s.mu.Unlock()
	if err == nil && then != nil {
		then()
	}
	return err
}

// A snapshot's age counts from when the write was sent, not from when its answer came:
// a write answered 900 ms after it was applied leaves a snapshot 900 ms old, which
// a 1 s MaxStaleness must not trust for long, since the record may have moved on in
// the meantime (here another replica opened it).
func TestWrittenSnapshotAgesFromTheRequest(t *testing.T) {
	clock := fakeclock.New(time.Date(2031, 3, 4, 5, 6, 7, 0, time.UTC))
	store := &circuittest.MemoryDriver{}
	slow := &slowAnswer{MemoryDriver: store}
	p := breaker.Policy{Scope: breaker.SharedDependency, FailureThreshold: 1, BreakDuration: time.Minute}
	newCircuit := func(d sharedstate.Driver) *sharedstate.Circuit {
		c, err := sharedstate.New(sharedstate.Config{Identity: "kafka:orders", Policy: p, Scope: breaker.SharedDependency,
			Driver: d, Clock: clock, MaxStaleness: time.Second, RetryDelay: -1})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	c, other := newCircuit(slow), newCircuit(store)
	ctx := context.Background()
	if err := c.Refresh(ctx); err != nil { // creates the record
		t.Fatal(err)
	}
	slow.then = func() {
		clock.Advance(900 * time.Millisecond)
		if err := other.ForceOpen(ctx, clock.Now().Add(time.Hour)); err != nil {
			t.Error(err)
		}
	}
	if err := c.ForceClose(ctx, clock.Now().Add(time.Hour)); err != nil {
		t.Fatal(err)
	}
	if p, err := c.Acquire(ctx); !errors.Is(err, breaker.ErrOpen) {
		p.Complete(breaker.Success)
		t.Fatalf("Acquire on a snapshot written 900 ms ago, of a circuit opened since: %v; want a rejection after a refresh", err)
	}
}

// The read that several callers wait for serves them all: the caller that started it
// cancelling its context must not fail the others.
func TestSharedReadOutlivesItsFirstCaller(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, nil)
	release := make(chan struct{})
	started := make(chan struct{}, 1)
	d.onLoad = func() {
		select {
		case started <- struct{}{}:
		default:
		}
		<-release
	}
	leaderCtx, cancel := context.WithCancel(context.Background())
	leader := make(chan error, 1)
	go func() { leader <- c.Refresh(leaderCtx) }()
	<-started
	waiter := make(chan error, 1)
	go func() { waiter <- c.Refresh(context.Background()) }()
	waitForJoin(t)
	cancel()
	close(release)
	<-leader
	if err := <-waiter; err != nil {
		t.Fatalf("a caller waiting on a read whose first caller cancelled: %v; want the read's result", err)
	}
}

// waitForJoin returns once a goroutine waits in refresh for the read in flight (its
// stack shows it parked in refresh's select), so that the test is about a waiter.
func waitForJoin(t *testing.T) {
	t.Helper()
	buf := make([]byte, 1<<20)
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); runtime.Gosched() {
		for _, g := range strings.Split(string(buf[:runtime.Stack(buf, true)]), "\n\n") {
			if strings.Contains(g, "[select") && strings.Contains(g, "sharedstate.(*Circuit).refresh(") {
				return
			}
		}
	}
	t.Fatal("no caller joined the read in flight")
}

// A soft refresh that took longer than MaxStaleness must not admit on the clock
// reading from before it: the snapshot is stale by then.
func TestSoftRefreshDecidesOnTheClockAfterIt(t *testing.T) {
	clock := fakeclock.New(rulesT0)
	d := newCounting()
	c := ruleCircuit(t, d, clock, func(cfg *sharedstate.Config) { cfg.RetryDelay = -1 })
	if err := c.Refresh(context.Background()); err != nil {
		t.Fatal(err)
	}
	clock.Advance(800 * time.Millisecond) // past three quarters: the next Acquire refreshes softly
	d.onLoad = func() {
		clock.Advance(time.Second) // the read takes a second...
		d.Down(errDown)            // ...and fails
	}
	if p, err := c.Acquire(context.Background()); err == nil {
		p.Complete(breaker.Neutral)
		t.Fatal("admitted on a snapshot that was 1.8 s old when the refresh ended (MaxStaleness 1 s)")
	}
}
