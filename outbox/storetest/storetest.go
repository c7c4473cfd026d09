// Package storetest is a conformance suite for outbox.Store implementations: claims
// and leases, fencing by claim token, holds and probes, deferrals, failures, release,
// order per key, backlog, and, for stores that offer them, retention (outbox.Purger),
// dead rows and requeue (outbox.DeadLetters) and the on-call reads (outbox.OnCall).
//
// The memory store and the PostgreSQL store pass it; a third party proves a store of
// its own by calling Run from a test:
//
//	func TestMyStore(t *testing.T) {
//		storetest.Run(t, func(t *testing.T, clock breaker.Clock) storetest.Store {
//			s := mystore.New(freshTable(t), mystore.WithClock(clock))
//			return storetest.Store{Store: s, Enqueue: s.Enqueue}
//		})
//	}
//
// Every rule is checked on a fresh store, with time given by a fake clock the suite
// advances: a store must take the time of created_at, and of the ages Backlog reports,
// from the clock it is handed, and every other time from the requests.
package storetest

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// Store is a store under test and the way to put rows into it.
type Store struct {
	outbox.Store
	// Enqueue commits entries as an application would (in a transaction of its own
	// for a database) and returns their ids in order.
	Enqueue func(ctx context.Context, entries ...outbox.Entry) ([]int64, error)
}

// NewStore returns a fresh, empty store that reads time from clock. It is called once
// per rule, with the rule's own subtest.
type NewStore func(t *testing.T, clock breaker.Clock) Store

// Start is the time the fake clock starts at.
var Start = time.Date(2030, 1, 2, 3, 4, 5, 0, time.UTC)

// Lease is the lease every claim of the suite takes.
const Lease = time.Minute

var (
	orders = transport.Destination{Broker: "kafka", Name: "orders"}
	emails = transport.Destination{Broker: "kafka", Name: "emails"}
)

// Run checks every rule against stores made by newStore.
func Run(t *testing.T, newStore NewStore) {
	for _, r := range rules {
		t.Run(r.name, func(t *testing.T) {
			clock := fakeclock.New(Start)
			r.run(&suite{t: t, clock: clock, s: newStore(t, clock), ctx: context.Background()})
		})
	}
}

var rules = []struct {
	name string
	run  func(*suite)
}{
	{"ClaimTakesDueRowsOldestFirst", claimTakesDueRowsOldestFirst},
	{"RowsRoundTrip", rowsRoundTrip},
	{"ConcurrentClaimsNeverShareARow", concurrentClaimsNeverShareARow},
	{"AnEndedLeaseIsTakenOverAndFencesItsClaim", endedLeaseIsTakenOver},
	{"WriteBacksNeedTheLeasingToken", writeBacksNeedTheLeasingToken},
	{"ReleaseGivesBackOnlyItsOwnRows", releaseGivesBackOnlyItsOwnRows},
	{"FailChargesAnAttemptAndBacksOff", failChargesAnAttempt},
	{"DeferGivesRowsBackUncharged", deferGivesRowsBackUncharged},
	{"KeyOrder", keyOrder},
	{"HoldKeepsRowsBackThenOneProbe", holdThenProbe},
	{"UnholdNeedsTheProbeToken", unholdNeedsTheProbeToken},
	{"HoldTakesTheLaterUntilUnlessItHoldsTheProbe", holdTakesTheLaterUntil},
	{"DeferralExhaustionSparesRowsOtherClaimsLease", deferralExhaustionSparesLeasedRows},
	{"DeferralExhaustionTakesTheHoldersOwnRows", deferralExhaustionTakesOwnRows},
	{"DeferralIsCountedFromTheLaterOfCreationAndTheHold", deferralCountsFromCreationOrHold},
	{"AFailedProbesHoldEndsItsClaimOnTheHold", failedProbeHoldEndsItsClaim},
	{"AnEndedHoldWithNoRowsLeavesNoProbe", endedHoldWithNoRowsLeavesNoProbe},
	{"BacklogCountsPendingRows", backlogCountsPending},
	{"InvalidEntriesAreRefusedWhole", invalidEntriesRefused},
	{"RetentionDeletesOnlySettledRows", retention},
	{"DeadRowsArePagedFilteredAndRequeued", deadRowsAndRequeue},
	{"OnCallListsHoldsAndDeadCounts", onCall},
	{"AnEndedSessionsRowsAreTakenAtOnce", endedSessionsRowsAreTakenAtOnce},
	{"FewKeysAreSharedByTheLiveSessions", fewKeysAreShared},
	{"OneRepeatedKeyBesideUnkeyedRowsIsShared", oneRepeatBesideUnkeyed},
	{"AClaimStopsAtItsBytes", claimStopsAtItsBytes},
	{"AnEntryAtTheLimitIsStored", entryAtTheLimitIsStored},
}

// suite is one rule's fixture.
type suite struct {
	t     *testing.T
	clock *fakeclock.Clock
	s     Store
	ctx   context.Context
}

func (x *suite) enqueue(entries ...outbox.Entry) []int64 {
	x.t.Helper()
	ids, err := x.s.Enqueue(x.ctx, entries...)
	if err != nil {
		x.t.Fatalf("Enqueue: %v", err)
	}
	if len(ids) != len(entries) {
		x.t.Fatalf("Enqueue returned %d ids for %d entries", len(ids), len(entries))
	}
	return ids
}

// rows enqueues n rows for d, keyed by key when it is not empty.
func (x *suite) rows(d transport.Destination, key string, n int) []int64 {
	x.t.Helper()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = entry(d, key, fmt.Sprint(d.Name, " ", key, " ", i))
	}
	return x.enqueue(entries...)
}

func entry(d transport.Destination, key, value string) outbox.Entry {
	m := transport.Message{Value: []byte(value)}
	if key != "" {
		m.Key = []byte(key)
	}
	return outbox.Entry{Destination: d, Message: m}
}

func (x *suite) claimN(token string, limit, probes int) []outbox.Record {
	x.t.Helper()
	recs, err := x.s.Claim(x.ctx, outbox.ClaimRequest{Token: token, Now: x.clock.Now(), Limit: limit, Lease: Lease, ProbeLimit: probes})
	if err != nil {
		x.t.Fatalf("Claim(%s): %v", token, err)
	}
	return recs
}

func (x *suite) claim(token string) []outbox.Record { x.t.Helper(); return x.claimN(token, 100, 1) }

func (x *suite) published(token string, ids []int64) int {
	x.t.Helper()
	n, err := x.s.MarkPublished(x.ctx, token, x.clock.Now(), ids)
	if err != nil {
		x.t.Fatalf("MarkPublished(%s): %v", token, err)
	}
	return n
}

func (x *suite) hold(d transport.Destination, token string, until time.Time, maxDeferral time.Duration) int {
	x.t.Helper()
	dead, err := x.s.Hold(x.ctx, outbox.Hold{Destination: d, Token: token, Now: x.clock.Now(), Until: until, MaxDeferral: maxDeferral})
	if err != nil {
		x.t.Fatalf("Hold(%s, %s): %v", d, token, err)
	}
	return dead
}

func (x *suite) deferRows(token string, ids []int64) int {
	x.t.Helper()
	n, err := x.s.Defer(x.ctx, outbox.Deferral{Token: token, IDs: ids, Now: x.clock.Now()})
	if err != nil {
		x.t.Fatalf("Defer(%s): %v", token, err)
	}
	return n
}

func (x *suite) wantIDs(what string, got []outbox.Record, want ...int64) {
	x.t.Helper()
	if g := ids(got); !slices.Equal(g, want) && !(len(g) == 0 && len(want) == 0) {
		x.t.Fatalf("%s: rows %v, want %v", what, g, want)
	}
}

func ids(recs []outbox.Record) []int64 {
	out := make([]int64, len(recs))
	for i, r := range recs {
		out[i] = r.ID
	}
	return out
}

func concat(parts ...[]int64) []int64 { return slices.Concat(parts...) }

func claimTakesDueRowsOldestFirst(x *suite) {
	a := x.rows(orders, "", 3)
	b := x.rows(emails, "", 2)
	x.wantIDs("first claim (limit 4)", x.claimN("c1", 4, 1), concat(a, b[:1])...)
	x.wantIDs("second claim", x.claim("c2"), b[1:]...)
	x.wantIDs("third claim, every row leased", x.claim("c3"))
}

func rowsRoundTrip(x *suite) {
	e := outbox.Entry{Destination: orders, Message: transport.Message{
		Key: []byte("order-7"), Value: []byte{0, 1, 2, 0xff},
		Headers: []transport.Header{{Key: "content-type", Value: []byte("application/json")}, {Key: "empty"}},
	}}
	id := x.enqueue(e)[0]
	scribble := func(m transport.Message) { // the caller's buffers are its own again
		m.Key[0], m.Value[0], m.Headers[0].Value[0] = 'X', 'X', 'X'
	}
	scribble(e.Message)
	x.clock.Advance(time.Second)
	got := x.claim("c")
	if len(got) != 1 {
		x.t.Fatalf("claim: %d rows, want 1", len(got))
	}
	scribble(got[0].Message)
	if err := x.s.Release(x.ctx, "c"); err != nil {
		x.t.Fatal(err)
	}
	if got = x.claim("c"); len(got) != 1 {
		x.t.Fatalf("claim after Release: %d rows, want 1", len(got))
	}
	r := got[0]
	switch {
	case r.ID != id || r.Destination != orders || r.Status != outbox.StatusPending:
		x.t.Errorf("row %d %s %s; want %d %s pending", r.ID, r.Destination, r.Status, id, orders)
	case string(r.Message.Key) != "order-7" || string(r.Message.Value) != "\x00\x01\x02\xff":
		x.t.Errorf("message %q/%q; want %q/%q (changes to the enqueued or claimed buffers must not reach the row)",
			r.Message.Key, r.Message.Value, "order-7", "\x00\x01\x02\xff")
	case len(r.Message.Headers) != 2 || r.Message.Headers[0].Key != "content-type" ||
		string(r.Message.Headers[0].Value) != "application/json" || r.Message.Headers[1].Key != "empty" || len(r.Message.Headers[1].Value) != 0:
		x.t.Errorf("headers %+v; want them as enqueued, in order", r.Message.Headers)
	case !r.CreatedAt.Equal(Start):
		x.t.Errorf("CreatedAt %v; want the store clock's time at Enqueue, %v", r.CreatedAt, Start)
	case r.LeaseOwner != "c" || !r.LeaseUntil.Equal(x.clock.Now().Add(Lease)):
		x.t.Errorf("lease %q until %v; want c until %v", r.LeaseOwner, r.LeaseUntil, x.clock.Now().Add(Lease))
	case r.Attempts != 0 || r.Deferrals != 0 || r.Probe || r.Undecodable != "":
		x.t.Errorf("new row with attempts %d, deferrals %d, probe %v, undecodable %q", r.Attempts, r.Deferrals, r.Probe, r.Undecodable)
	}
}

func concurrentClaimsNeverShareARow(x *suite) {
	all := x.rows(orders, "", 120)
	var mu sync.Mutex
	seen := map[int64]string{}
	var wg sync.WaitGroup
	errs := make(chan error, 6)
	for w := range 6 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				token := fmt.Sprintf("w%d-%d", w, i)
				recs, err := x.s.Claim(x.ctx, outbox.ClaimRequest{Token: token, Now: x.clock.Now(), Limit: 7, Lease: Lease, ProbeLimit: 1})
				if err != nil {
					errs <- err
					return
				}
				if len(recs) == 0 {
					return
				}
				mu.Lock()
				for _, r := range recs {
					if other, dup := seen[r.ID]; dup {
						errs <- fmt.Errorf("row %d claimed by %s and %s while leased", r.ID, other, token)
					}
					seen[r.ID] = token
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		x.t.Error(err)
	}
	if len(seen) != len(all) {
		x.t.Errorf("claims took %d distinct rows of %d", len(seen), len(all))
	}
}

func endedLeaseIsTakenOver(x *suite) {
	id := x.rows(orders, "", 2)
	x.wantIDs("first claim", x.claim("old"), id...)
	x.clock.Advance(Lease - time.Millisecond)
	x.wantIDs("claim while the lease lasts", x.claim("early"))
	x.clock.Advance(time.Millisecond)
	x.wantIDs("claim when the lease ended", x.claim("new"), id...)
	if n := x.published("old", id); n != 0 {
		x.t.Fatalf("MarkPublished by the claim whose lease ended changed %d rows, want 0", n)
	}
	if f, d, err := x.s.Fail(x.ctx, "old", []outbox.Failure{{ID: id[0], RetryAt: x.clock.Now(), Dead: true, Err: "late"}}); f+d != 0 || err != nil {
		x.t.Fatalf("Fail by the old claim = %d, %d, %v; want nothing changed", f, d, err)
	}
	if n := x.published("new", id); n != 2 {
		x.t.Fatalf("MarkPublished by the new claim changed %d rows, want 2", n)
	}
	x.clock.Advance(2 * Lease)
	x.wantIDs("claim after publishing", x.claim("after"))
}

func writeBacksNeedTheLeasingToken(x *suite) {
	id := x.rows(orders, "", 1)
	x.wantIDs("claim", x.claim("owner"), id...)
	if n := x.published("intruder", id); n != 0 {
		x.t.Errorf("MarkPublished by another token changed %d rows", n)
	}
	if f, d, err := x.s.Fail(x.ctx, "intruder", []outbox.Failure{{ID: id[0], RetryAt: x.clock.Now(), Err: "x"}}); f+d != 0 || err != nil {
		x.t.Errorf("Fail by another token = %d, %d, %v", f, d, err)
	}
	if n := x.deferRows("intruder", id); n != 0 {
		x.t.Errorf("Defer by another token changed %d rows", n)
	}
	if err := x.s.Release(x.ctx, "intruder"); err != nil {
		x.t.Fatal(err)
	}
	x.wantIDs("claim after another token's write-backs and Release", x.claim("other"))
	if n := x.published("owner", id); n != 1 {
		x.t.Fatalf("MarkPublished by the owner changed %d rows, want 1", n)
	}
	if n := x.published("owner", id); n != 0 {
		x.t.Fatalf("MarkPublished of a published row changed %d rows, want 0", n)
	}
	if n := x.published("owner", []int64{0, -1, id[0] + 1000}); n != 0 {
		x.t.Fatalf("MarkPublished of ids no row has changed %d rows, want 0", n)
	}
}

func releaseGivesBackOnlyItsOwnRows(x *suite) {
	id := x.rows(orders, "", 4)
	x.wantIDs("claim a", x.claimN("a", 2, 1), id[:2]...)
	x.wantIDs("claim b", x.claimN("b", 2, 1), id[2:]...)
	if err := x.s.Release(x.ctx, "a"); err != nil {
		x.t.Fatal(err)
	}
	x.wantIDs("claim after a released", x.claim("c"), id[:2]...)
	if n := x.published("b", id[2:]); n != 2 {
		x.t.Fatalf("b's rows after a's Release: MarkPublished changed %d, want 2", n)
	}
}

func failChargesAnAttempt(x *suite) {
	id := x.rows(orders, "", 2)
	x.claim("c")
	retry := x.clock.Now().Add(10 * time.Second)
	failed, dead, err := x.s.Fail(x.ctx, "c", []outbox.Failure{
		{ID: id[0], RetryAt: retry, Err: "message too large"},
		{ID: id[1], RetryAt: retry, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": bad"},
	})
	if err != nil || failed != 1 || dead != 1 {
		x.t.Fatalf("Fail = %d failed, %d dead, %v; want 1, 1", failed, dead, err)
	}
	x.clock.Advance(10*time.Second - time.Millisecond)
	x.wantIDs("claim during the backoff", x.claim("early"))
	x.clock.Advance(time.Millisecond)
	got := x.claim("again")
	x.wantIDs("claim after the backoff", got, id[0])
	if r := got[0]; r.Attempts != 1 || r.LastError != "message too large" || !r.VisibleAfter.Equal(retry) || r.Deferrals != 0 {
		x.t.Errorf("failed row: attempts %d, last error %q, visible %v, deferrals %d; want 1, the error, %v, 0",
			r.Attempts, r.LastError, r.VisibleAfter, r.Deferrals, retry)
	}
	if dl, ok := x.s.Store.(outbox.DeadLetters); ok {
		rows, err := dl.DeadRows(x.ctx, outbox.DeadFilter{}, outbox.Page{Limit: 10})
		if err != nil || len(rows) != 1 || rows[0].ID != id[1] || rows[0].Status != outbox.StatusDead || rows[0].Attempts != 1 {
			x.t.Errorf("dead rows %+v, %v; want row %d dead with one attempt", rows, err, id[1])
		}
	}
	if n, _, err := x.s.Backlog(x.ctx); n != 1 || err != nil {
		x.t.Errorf("Backlog = %d, %v; want 1 (the dead row is not pending)", n, err)
	}
}

func deferGivesRowsBackUncharged(x *suite) {
	id := x.rows(orders, "", 1)
	x.claim("c1")
	first := x.clock.Now()
	if n := x.deferRows("c1", id); n != 1 {
		x.t.Fatalf("Defer changed %d rows, want 1", n)
	}
	x.clock.Advance(time.Second)
	got := x.claim("c2")
	x.wantIDs("claim after the deferral", got, id...)
	x.clock.Advance(time.Second)
	x.deferRows("c2", id)
	got = x.claim("c3")
	x.wantIDs("claim after the second deferral", got, id...)
	if r := got[0]; r.Deferrals != 2 || r.Attempts != 0 || !r.FirstDeferredAt.Equal(first) || r.LastError != "" {
		x.t.Errorf("deferred row: deferrals %d, attempts %d, first deferred %v, last error %q; want 2, 0, %v, none",
			r.Deferrals, r.Attempts, r.FirstDeferredAt, r.LastError, first)
	}
}

func keyOrder(x *suite) {
	k1 := x.rows(orders, "k1", 2)
	k2 := x.rows(orders, "k2", 1)
	otherDest := x.rows(emails, "k1", 1)
	free := x.rows(orders, "", 1)
	x.wantIDs("first claim (limit 1)", x.claimN("a", 1, 1), k1[0])
	// k1[1] waits behind its leased predecessor; the rest are free to go.
	x.wantIDs("claim while k1's first row is leased", x.claim("b"), concat(k2, otherDest, free)...)
	x.published("b", concat(k2, otherDest, free))
	if f, _, err := x.s.Fail(x.ctx, "a", []outbox.Failure{{ID: k1[0], RetryAt: x.clock.Now().Add(time.Minute), Err: "refused"}}); f != 1 || err != nil {
		x.t.Fatalf("Fail = %d, %v", f, err)
	}
	x.wantIDs("claim while k1's first row backs off", x.claim("c"))
	x.clock.Advance(time.Minute)
	// One claim may take a key's rows together: they come back in enqueue order.
	x.wantIDs("claim after the backoff", x.claim("d"), k1...)
}

func holdThenProbe(x *suite) {
	held := x.rows(orders, "", 3)
	free := x.rows(emails, "", 1)
	x.claim("c")
	x.hold(orders, "c", x.clock.Now().Add(30*time.Second), time.Hour)
	x.deferRows("c", held)
	x.published("c", free)
	more := x.rows(emails, "", 1)
	x.wantIDs("claim during the hold takes only the other destination", x.claim("during"), more...)
	x.clock.Advance(30 * time.Second)
	probe := x.claimN("probe", 100, 1)
	x.wantIDs("claim when the hold ended: one probe", probe, held[0])
	if !probe[0].Probe {
		x.t.Fatal("the probe row is not marked Probe")
	}
	x.wantIDs("claim while the probe is out", x.claim("sibling"))
	x.published("probe", held[:1])
	if err := x.s.Unhold(x.ctx, orders, "probe"); err != nil {
		x.t.Fatal(err)
	}
	got := x.claim("after")
	x.wantIDs("claim after Unhold", got, held[1:]...)
	for _, r := range got {
		if r.Probe {
			x.t.Errorf("row %d marked Probe after the hold ended", r.ID)
		}
	}
}

func unholdNeedsTheProbeToken(x *suite) {
	held := x.rows(orders, "", 2)
	x.claim("c")
	x.hold(orders, "c", x.clock.Now().Add(time.Second), time.Hour)
	x.deferRows("c", held)
	x.clock.Advance(time.Second)
	x.wantIDs("probe", x.claimN("probe", 100, 1), held[0])
	for _, token := range []string{"c", "stranger"} {
		if err := x.s.Unhold(x.ctx, orders, token); err != nil {
			x.t.Fatal(err)
		}
	}
	x.wantIDs("claim after Unhold by tokens that do not hold the probe", x.claim("sibling"))
	if err := x.s.Unhold(x.ctx, orders, "probe"); err != nil {
		x.t.Fatal(err)
	}
	x.wantIDs("claim after the probe's Unhold", x.claim("after"), held[1])
}

func holdTakesTheLaterUntil(x *suite) {
	held := x.rows(orders, "", 2)
	x.claim("c")
	t0 := x.clock.Now()
	x.hold(orders, "c", t0.Add(time.Minute), time.Hour)
	x.hold(orders, "other", t0.Add(10*time.Second), time.Hour) // a shorter hold does not shorten it
	x.deferRows("c", held)
	x.clock.Set(t0.Add(30 * time.Second))
	x.wantIDs("claim at +30s, held until +1m", x.claim("early"))
	x.clock.Set(t0.Add(time.Minute))
	x.wantIDs("probe at +1m", x.claimN("probe", 100, 1), held[0])
	// The probe's own hold (it failed) sets the end, even to an earlier time than the
	// lease-extended one.
	x.hold(orders, "probe", t0.Add(time.Minute+5*time.Second), time.Hour)
	x.deferRows("probe", held[:1])
	x.clock.Set(t0.Add(time.Minute + 5*time.Second))
	x.wantIDs("probe after the probe's shorter hold", x.claimN("probe2", 100, 1), held[0])
}

func deferralExhaustionSparesLeasedRows(x *suite) {
	rows := x.rows(orders, "", 3)
	x.claim("c")
	t0 := x.clock.Now()
	x.hold(orders, "c", t0.Add(time.Minute), 5*time.Minute)
	x.deferRows("c", rows)
	x.clock.Set(t0.Add(10 * time.Minute))
	x.wantIDs("probe", x.claimN("probe", 100, 1), rows[0])
	// Another dispatcher renews the hold past MaxDeferral: the rows nobody leases die,
	// the probe that "probe" still leases does not.
	if dead := x.hold(orders, "other", x.clock.Now().Add(time.Minute), 5*time.Minute); dead != 2 {
		x.t.Fatalf("Hold past MaxDeferral by another claim made %d rows dead, want 2 (not the leased probe)", dead)
	}
	if n := x.published("probe", rows[:1]); n != 1 {
		x.t.Fatalf("the leased probe could not be published after another claim's Hold (%d rows)", n)
	}
	if dl, ok := x.s.Store.(outbox.DeadLetters); ok {
		dead, err := dl.DeadRows(x.ctx, outbox.DeadFilter{Reason: outbox.ReasonDeferralExhausted}, outbox.Page{Limit: 10})
		if err != nil || !slices.Equal(ids(dead), rows[1:]) {
			x.t.Errorf("rows dead of deferral exhaustion: %v, %v; want %v", ids(dead), err, rows[1:])
		}
	}
}

func deferralExhaustionTakesOwnRows(x *suite) {
	rows := x.rows(orders, "", 1)
	x.claim("c")
	t0 := x.clock.Now()
	x.hold(orders, "c", t0.Add(time.Minute), 5*time.Minute)
	x.deferRows("c", rows)
	x.clock.Set(t0.Add(10 * time.Minute))
	x.wantIDs("probe", x.claimN("probe", 100, 1), rows...)
	// The probe failed and its claim renews the hold past MaxDeferral: its own row dies.
	if dead := x.hold(orders, "probe", x.clock.Now().Add(time.Minute), 5*time.Minute); dead != 1 {
		x.t.Fatalf("the probe's own Hold past MaxDeferral made %d rows dead, want its probe row", dead)
	}
	if n, _, err := x.s.Backlog(x.ctx); n != 0 || err != nil {
		x.t.Fatalf("Backlog = %d, %v; want 0", n, err)
	}
}

// A row's wait under a hold runs from the later of its creation and the hold's start,
// and a row dies only once that wait is longer than MaxDeferral: a row created during
// the hold gets the whole MaxDeferral, and exactly MaxDeferral is not yet too long.
// Another destination's rows are never touched.
func deferralCountsFromCreationOrHold(x *suite) {
	const maxDeferral = 5 * time.Minute
	before := x.rows(orders, "", 1)
	other := x.rows(emails, "", 1)
	t0 := x.clock.Now()
	x.hold(orders, "c", t0.Add(time.Minute), maxDeferral)
	x.clock.Set(t0.Add(2 * time.Minute))
	during := x.rows(orders, "", 1)
	x.clock.Set(t0.Add(2*time.Minute + maxDeferral)) // during has waited exactly maxDeferral
	if dead := x.hold(orders, "c", x.clock.Now().Add(time.Minute), maxDeferral); dead != 1 {
		x.t.Fatalf("Hold %v after the hold began made %d rows dead, want 1 (the row older than the hold)", x.clock.Now().Sub(t0), dead)
	}
	x.clock.Advance(time.Microsecond)
	if dead := x.hold(orders, "c", x.clock.Now().Add(time.Minute), maxDeferral); dead != 1 {
		x.t.Fatalf("Hold once the row created during the hold had waited longer than MaxDeferral made %d rows dead, want 1", dead)
	}
	if dl, ok := x.s.Store.(outbox.DeadLetters); ok {
		dead, err := dl.DeadRows(x.ctx, outbox.DeadFilter{Reason: outbox.ReasonDeferralExhausted}, outbox.Page{Limit: 10})
		if want := []int64{before[0], during[0]}; err != nil || !slices.Equal(ids(dead), want) {
			x.t.Errorf("rows dead of deferral exhaustion: %v, %v; want %v (not %v of another destination)", ids(dead), err, want, other)
		}
	}
	x.wantIDs("claim of the destination that is not held", x.claim("e"), other...)
}

func failedProbeHoldEndsItsClaim(x *suite) {
	rows := x.rows(orders, "", 2)
	x.claim("c")
	t0 := x.clock.Now()
	x.hold(orders, "c", t0.Add(time.Second), time.Hour)
	x.deferRows("c", rows)
	x.clock.Set(t0.Add(time.Second))
	x.wantIDs("probe", x.claimN("probe", 100, 1), rows[0])
	x.hold(orders, "probe", x.clock.Now().Add(time.Minute), time.Hour) // the probe failed
	x.deferRows("probe", rows[:1])
	// The failed probe's token holds nothing any more: a late Unhold of it (a write-back
	// that lost a race) must not end the new break.
	if err := x.s.Unhold(x.ctx, orders, "probe"); err != nil {
		x.t.Fatal(err)
	}
	x.clock.Advance(30 * time.Second)
	x.wantIDs("claim during the new break", x.claim("during"))
}

// A hold that ended while the destination had no pending rows is gone: rows enqueued
// afterwards are claimed like any others, not one probe at a time.
func endedHoldWithNoRowsLeavesNoProbe(x *suite) {
	x.hold(orders, "c", x.clock.Now().Add(time.Second), time.Hour)
	x.clock.Advance(2 * time.Second)
	x.wantIDs("claim after the hold ended, no rows", x.claim("c"))
	rows := x.rows(orders, "", 3)
	got := x.claimN("after", 100, 1)
	x.wantIDs("claim of rows enqueued after the hold ended", got, rows...)
	for _, r := range got {
		if r.Probe {
			x.t.Errorf("row %d marked Probe", r.ID)
		}
	}
}

func backlogCountsPending(x *suite) {
	if n, oldest, err := x.s.Backlog(x.ctx); n != 0 || oldest != 0 || err != nil {
		x.t.Fatalf("empty Backlog = %d, %v, %v", n, oldest, err)
	}
	first := x.rows(orders, "", 2)
	x.clock.Advance(5 * time.Second)
	x.rows(emails, "", 1)
	x.clock.Advance(time.Second)
	if n, oldest, err := x.s.Backlog(x.ctx); n != 3 || oldest != 6*time.Second || err != nil {
		x.t.Fatalf("Backlog = %d, %v, %v; want 3, 6s", n, oldest, err)
	}
	x.claimN("c", 2, 1)
	x.published("c", first)
	if n, oldest, err := x.s.Backlog(x.ctx); n != 1 || oldest != time.Second || err != nil {
		x.t.Fatalf("Backlog after publishing = %d, %v, %v; want 1, 1s", n, oldest, err)
	}
}

func invalidEntriesRefused(x *suite) {
	good := entry(orders, "", "good")
	bad := outbox.Entry{Destination: orders, Message: transport.Message{Headers: []transport.Header{{Key: "bad\x00key"}}}}
	if _, err := x.s.Enqueue(x.ctx, good, bad); err == nil {
		x.t.Fatal("Enqueue of a header key with NUL succeeded")
	}
	if _, err := x.s.Enqueue(x.ctx, outbox.Entry{Message: good.Message}); err == nil {
		x.t.Fatal("Enqueue without a destination succeeded")
	}
	// One byte over the broker's default limit, counting key, value and headers.
	limit := storekit.DefaultMaxEntryBytes(orders.Broker)
	large := outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte("k"), Value: make([]byte, limit-5),
		Headers: []transport.Header{{Key: "h", Value: []byte("1234")}}}}
	if _, err := x.s.Enqueue(x.ctx, good, large); !errors.Is(err, outbox.ErrTooLarge) {
		x.t.Fatalf("Enqueue of %d bytes for %s (limit %d) = %v; want outbox.ErrTooLarge", storekit.MessageSize(large.Message), orders, limit, err)
	}
	if n, _, err := x.s.Backlog(x.ctx); n != 0 || err != nil {
		x.t.Fatalf("Backlog after refused enqueues = %d, %v; want 0: nothing of a refused call is stored", n, err)
	}
}

func retention(x *suite) {
	p, ok := x.s.Store.(outbox.Purger)
	if !ok {
		x.t.Skip("the store is not an outbox.Purger")
	}
	ids := x.rows(orders, "", 4)
	x.claim("c")
	x.published("c", ids[:2])
	if _, d, err := x.s.Fail(x.ctx, "c", []outbox.Failure{{ID: ids[2], RetryAt: x.clock.Now(), Dead: true, Err: "dead"}}); d != 1 || err != nil {
		x.t.Fatalf("Fail = %d dead, %v", d, err)
	}
	if err := x.s.Release(x.ctx, "c"); err != nil {
		x.t.Fatal(err)
	}
	settled := x.clock.Now()
	x.clock.Advance(time.Hour)
	if _, err := p.DeleteSettled(x.ctx, settled.Add(time.Second), time.Time{}, -1); err == nil {
		x.t.Error("DeleteSettled with a negative limit succeeded")
	}
	if n, err := p.DeleteSettled(x.ctx, settled, settled, 10); n != 0 || err != nil {
		x.t.Fatalf("DeleteSettled before the settle time = %d, %v; want 0", n, err)
	}
	if n, err := p.DeleteSettled(x.ctx, settled.Add(time.Second), time.Time{}, 1); n != 1 || err != nil {
		x.t.Fatalf("DeleteSettled(limit 1) = %d, %v; want 1", n, err)
	}
	if n, err := p.DeleteSettled(x.ctx, settled.Add(time.Second), settled.Add(time.Second), 10); n != 2 || err != nil {
		x.t.Fatalf("DeleteSettled = %d, %v; want the other published row and the dead one", n, err)
	}
	x.wantIDs("the pending row is kept", x.claim("after"), ids[3])
}

func deadRowsAndRequeue(x *suite) {
	dl, ok := x.s.Store.(outbox.DeadLetters)
	if !ok {
		x.t.Skip("the store is not an outbox.DeadLetters")
	}
	a := x.rows(orders, "", 3)
	b := x.rows(emails, "", 1)
	x.claim("c")
	reasons := []string{outbox.ReasonAttemptsExhausted + ": too large", outbox.ReasonAttemptsExhausted, outbox.ReasonUndecodable + ": headers"}
	var fails []outbox.Failure
	for i, id := range a {
		fails = append(fails, outbox.Failure{ID: id, RetryAt: x.clock.Now(), Dead: true, Err: reasons[i]})
	}
	fails = append(fails, outbox.Failure{ID: b[0], RetryAt: x.clock.Now(), Dead: true, Err: outbox.ReasonAttemptsExhausted + ": x"})
	if _, d, err := x.s.Fail(x.ctx, "c", fails); d != 4 || err != nil {
		x.t.Fatalf("Fail = %d dead, %v", d, err)
	}
	page := func(f outbox.DeadFilter, p outbox.Page) []int64 {
		x.t.Helper()
		rows, err := dl.DeadRows(x.ctx, f, p)
		if err != nil {
			x.t.Fatalf("DeadRows(%+v): %v", f, err)
		}
		return ids(rows)
	}
	for _, tc := range []struct {
		name string
		f    outbox.DeadFilter
		p    outbox.Page
		want []int64
	}{
		{"all", outbox.DeadFilter{}, outbox.Page{Limit: 10}, concat(a, b)},
		{"first page", outbox.DeadFilter{}, outbox.Page{Limit: 2}, a[:2]},
		{"next page", outbox.DeadFilter{}, outbox.Page{After: a[1], Limit: 2}, concat(a[2:], b)},
		{"destination", outbox.DeadFilter{Destination: emails}, outbox.Page{Limit: 10}, b},
		{"reason with and without detail", outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted}, outbox.Page{Limit: 10}, concat(a[:2], b)},
		{"reason and destination", outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted, Destination: orders}, outbox.Page{Limit: 10}, a[:2]},
		{"reason that is only a prefix", outbox.DeadFilter{Reason: "attempts"}, outbox.Page{Limit: 10}, nil},
		{"ids", outbox.DeadFilter{IDs: []int64{a[2], b[0]}}, outbox.Page{Limit: 10}, []int64{a[2], b[0]}},
	} {
		if got := page(tc.f, tc.p); !slices.Equal(got, tc.want) && !(len(got) == 0 && len(tc.want) == 0) {
			x.t.Errorf("DeadRows %s: %v, want %v", tc.name, got, tc.want)
		}
	}
	if _, err := dl.Requeue(x.ctx, outbox.DeadFilter{}, x.clock.Now()); !errors.Is(err, outbox.ErrEmptyFilter) {
		x.t.Errorf("Requeue with an empty filter: %v, want ErrEmptyFilter", err)
	}
	x.clock.Advance(time.Minute)
	if n, err := dl.Requeue(x.ctx, outbox.DeadFilter{Reason: outbox.ReasonUndecodable}, x.clock.Now()); n != 1 || err != nil {
		x.t.Fatalf("Requeue = %d, %v; want 1", n, err)
	}
	got := x.claim("again")
	x.wantIDs("claim after Requeue", got, a[2])
	if r := got[0]; r.Attempts != 0 || r.Deferrals != 0 || !r.FirstDeferredAt.IsZero() || r.LastError != reasons[2] || !r.SettledAt.IsZero() {
		x.t.Errorf("requeued row: attempts %d, deferrals %d, first deferred %v, last error %q, settled %v; want counts cleared, the error kept",
			r.Attempts, r.Deferrals, r.FirstDeferredAt, r.LastError, r.SettledAt)
	}
}

func onCall(x *suite) {
	oc, ok := x.s.Store.(outbox.OnCall)
	if !ok {
		x.t.Skip("the store is not an outbox.OnCall")
	}
	ids := x.rows(orders, "", 3)
	x.claim("c")
	since := x.clock.Now()
	until := since.Add(time.Minute)
	x.hold(orders, "c", until, time.Hour)
	x.deferRows("c", ids[:1])
	if _, _, err := x.s.Fail(x.ctx, "c", []outbox.Failure{
		{ID: ids[1], RetryAt: since, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": a"},
		{ID: ids[2], RetryAt: since, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": b"},
	}); err != nil {
		x.t.Fatal(err)
	}
	x.hold(emails, "c", until, time.Hour) // listed first: by destination, in byte order
	holds, err := oc.Holds(x.ctx)
	if err != nil || len(holds) != 2 || holds[0].Destination != emails || holds[1].Destination != orders ||
		!holds[1].Until.Equal(until) || !holds[1].Since.Equal(since) {
		x.t.Errorf("Holds = %+v, %v; want emails, then orders held since %v until %v", holds, err, since, until)
	}
	counts, err := oc.DeadCounts(x.ctx)
	if err != nil || len(counts) != 1 || counts[0].Reason != outbox.ReasonAttemptsExhausted || counts[0].Rows != 2 {
		x.t.Errorf("DeadCounts = %+v, %v; want 2 %s", counts, err, outbox.ReasonAttemptsExhausted)
	}
}

// endedSessionsRowsAreTakenAtOnce: for a store with sessions (outbox.Sessions), the
// rows a session's claims lease stay leased while it lasts, are claimed by others at
// once (well within their lease) when it ends, and are then fenced from the ended
// claim's write-backs; another session's rows stay where they are.
func endedSessionsRowsAreTakenAtOnce(x *suite) {
	ss, ok := x.s.Store.(outbox.Sessions)
	if !ok {
		x.t.Skip("the store has no sessions")
	}
	a := x.rows(orders, "k1", 2)
	b := x.rows(orders, "k2", 1)
	endA, err := ss.Session(x.ctx, "relay-a/1/")
	if err != nil {
		x.t.Fatalf("Session: %v", err)
	}
	defer endA()
	endB, err := ss.Session(x.ctx, "relay-b/1/")
	if err != nil {
		x.t.Fatalf("Session: %v", err)
	}
	defer endB()
	x.wantIDs("claim in session a", x.claimN("relay-a/1/1", 2, 1), a...)
	x.wantIDs("claim in session b", x.claimN("relay-b/1/1", 1, 1), b...)
	x.clock.Advance(Lease / 2)
	x.wantIDs("claim while both sessions last", x.claim("relay-c/1/1"))
	endA()
	x.wantIDs("claim after session a ended, within its lease", x.claim("relay-c/1/2"), a...)
	if n := x.published("relay-a/1/1", a); n != 0 {
		x.t.Fatalf("MarkPublished by the ended session's claim changed %d rows, want 0", n)
	}
	if n := x.published("relay-b/1/1", b); n != 1 {
		x.t.Fatalf("MarkPublished by the live session's claim changed %d rows, want 1", n)
	}
	if n := x.published("relay-c/1/2", a); n != 2 {
		x.t.Fatalf("MarkPublished by the claim that took the rows over changed %d rows, want 2", n)
	}
}

// fewKeysAreShared: with fewer keys than a batch and three sessions live, a claim
// takes the rows of its share of the keys (a third, rounded up, by their first row,
// among three batches' worth of candidates), deep into each, so that the other
// relays' claims find keys of their own; unkeyed rows go with any claim. With one
// session, a claim takes the oldest rows whatever their keys.
func fewKeysAreShared(x *suite) {
	ss, ok := x.s.Store.(outbox.Sessions)
	if !ok {
		x.t.Skip("the store has no sessions: it cannot know how many relays share the keys")
	}
	var entries []outbox.Entry
	for i := range 4 { // six keys, four rows each, enqueued round robin
		for k := range 6 {
			entries = append(entries, entry(orders, fmt.Sprint("k", k), fmt.Sprint(k, " ", i)))
		}
	}
	entries = append(entries, entry(orders, "", "unkeyed"))
	ids := x.enqueue(entries...)
	// ofKeys returns the ids of the rows of keys left after the first eight.
	ofKeys := func(keys ...int) []int64 {
		var out []int64
		for i := 8; i < 24; i++ {
			if slices.Contains(keys, i%6) {
				out = append(out, ids[i])
			}
		}
		return out
	}
	endA, err := ss.Session(x.ctx, "relay-a/1/")
	if err != nil {
		x.t.Fatalf("Session: %v", err)
	}
	defer endA()
	x.wantIDs("claim with one session", x.claimN("relay-a/1/1", 8, 1), ids[:8]...)
	if n := x.published("relay-a/1/1", ids[:8]); n != 8 {
		x.t.Fatalf("MarkPublished changed %d rows, want 8", n)
	}
	for _, p := range []string{"relay-b/1/", "relay-c/1/"} {
		end, err := ss.Session(x.ctx, p)
		if err != nil {
			x.t.Fatalf("Session: %v", err)
		}
		defer end()
	}
	// Left: k2 to k5 (first rows in that order) with two rows each after the first,
	// k0 and k1 with two: six keys, a share of two for the first claim, of the four
	// keys left two for the second, of the two left one for the third.
	x.wantIDs("first claim of three sessions: k2 and k3, and the unkeyed row", x.claimN("relay-a/1/2", 8, 1),
		append(ofKeys(2, 3), ids[24])...)
	x.wantIDs("second claim: k4 and k5", x.claimN("relay-b/1/1", 8, 1), ofKeys(4, 5)...)
	x.wantIDs("third claim: k0", x.claimN("relay-c/1/1", 8, 1), ofKeys(0)...)
}

// oneRepeatBesideUnkeyed: among a claim's candidates, one key that comes back is
// enough for the claim to share the keys, unkeyed rows or not: with two sessions, of
// an unkeyed row, k0 twice and k1, a claim takes the unkeyed row and k0's.
func oneRepeatBesideUnkeyed(x *suite) {
	ss, ok := x.s.Store.(outbox.Sessions)
	if !ok {
		x.t.Skip("the store has no sessions: it cannot know how many relays share the keys")
	}
	ids := x.enqueue(entry(orders, "", "u"), entry(orders, "k0", "a"), entry(orders, "k0", "b"), entry(orders, "k1", "c"))
	for _, p := range []string{"relay-a/1/", "relay-b/1/"} {
		end, err := ss.Session(x.ctx, p)
		if err != nil {
			x.t.Fatalf("Session: %v", err)
		}
		defer end()
	}
	x.wantIDs("claim of two sessions", x.claimN("relay-a/1/1", 4, 1), ids[:3]...)
	x.wantIDs("the other session's claim", x.claimN("relay-b/1/1", 4, 1), ids[3])
}

// claimStopsAtItsBytes: a claim with MaxBytes takes rows oldest first while their
// total stays within it (each row's key and value counted; these rows have no
// headers), and a first row larger than MaxBytes alone; a later claim takes the rest.
func claimStopsAtItsBytes(x *suite) {
	const kib = 1 << 10
	var entries []outbox.Entry
	for i := range 5 {
		entries = append(entries, outbox.Entry{Destination: orders, Message: transport.Message{Value: make([]byte, 300*kib+i)}})
	}
	entries = append(entries, outbox.Entry{Destination: emails, Message: transport.Message{Value: make([]byte, 700*kib)}})
	id := x.enqueue(entries...)
	claim := func(token string, maxBytes int) []outbox.Record {
		x.t.Helper()
		recs, err := x.s.Claim(x.ctx, outbox.ClaimRequest{Token: token, Now: x.clock.Now(), Limit: 100, Lease: Lease, ProbeLimit: 1, MaxBytes: maxBytes})
		if err != nil {
			x.t.Fatalf("Claim(%s): %v", token, err)
		}
		return recs
	}
	x.wantIDs("claim within 1000 KiB", claim("a", 1000*kib), id[:3]...)
	x.wantIDs("claim within 100 KiB: the first row, alone", claim("b", 100*kib), id[3])
	x.wantIDs("claim within 1000 KiB of the rest", claim("c", 1000*kib), id[4])
	x.wantIDs("claim without a bound in bytes", claim("d", 0), id[5])
}

// entryAtTheLimitIsStored: an entry of exactly its broker's default limit (key, value
// and headers together) is stored and read back whole.
func entryAtTheLimitIsStored(x *suite) {
	for _, d := range []transport.Destination{orders, {Broker: "sqs", Name: "orders"}} {
		limit := storekit.DefaultMaxEntryBytes(d.Broker)
		e := outbox.Entry{Destination: d, Message: transport.Message{Key: []byte("k"), Value: make([]byte, limit-5),
			Headers: []transport.Header{{Key: "h", Value: []byte("123")}}}}
		id := x.enqueue(e)
		recs := x.claim("at-limit-" + d.Broker)
		if len(recs) != 1 || recs[0].ID != id[0] || len(recs[0].Message.Value) != limit-5 {
			x.t.Fatalf("%s: claimed %d rows; want row %d with its %d bytes", d, len(recs), id[0], limit-5)
		}
		if n := x.published("at-limit-"+d.Broker, id); n != 1 {
			x.t.Fatalf("%s: MarkPublished changed %d rows", d, n)
		}
	}
}
