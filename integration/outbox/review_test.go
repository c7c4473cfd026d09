package outbox_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// The Processor writes a dead row's LastError as "reason: detail" (only
// ReasonDeferralExhausted has no detail), so a filter by reason must find the rows
// of every documented reason, not only those whose LastError is the bare reason.
func TestDeadRowsFilteredByReasonWithDetail(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store.(admin)
		ids := settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{
			{orders, outbox.ReasonAttemptsExhausted + ": message too large"},
			{emails, outbox.ReasonUndecodable + ": headers: invalid character"},
			{orders, outbox.ReasonDeferralExhausted},
			{orders, outbox.ReasonAttemptsExhausted + "_not: a reason of its own"},
			{emails, outbox.ReasonAttemptsExhausted + ": bad key"},
		})
		for _, tc := range []struct {
			filter outbox.DeadFilter
			want   []int
		}{
			{outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted}, []int{0, 4}},
			{outbox.DeadFilter{Reason: outbox.ReasonUndecodable}, []int{1}},
			{outbox.DeadFilter{Reason: outbox.ReasonDeferralExhausted}, []int{2}},
			{outbox.DeadFilter{Reason: outbox.ReasonAttemptsExhausted + ": bad key"}, []int{4}},
		} {
			recs, err := s.DeadRows(ctx, tc.filter, outbox.Page{})
			if got := positions(recs, ids); err != nil || !slices.Equal(got, tc.want) {
				t.Errorf("DeadRows(reason %q) = rows %v, %v; want %v", tc.filter.Reason, got, err, tc.want)
			}
		}
		n, err := s.Requeue(ctx, outbox.DeadFilter{Destination: orders, Reason: outbox.ReasonAttemptsExhausted}, clock.Now())
		if n != 1 || err != nil {
			t.Fatalf("Requeue(orders, %s) = %d, %v; want 1 row", outbox.ReasonAttemptsExhausted, n, err)
		}
		if r := sc.get(t, ids[0]); r.Status != outbox.StatusPending {
			t.Errorf("requeued row is %s", r.Status)
		}
	})
}

// A hold lasts until its end even when its destination has no pending row left (all
// of them made dead by the hold, say): a row enqueued meanwhile is held too, and its
// outage is measured from the hold's start. Both stores drop such a hold only once
// it has ended.
func TestHoldWithoutPendingRowsLastsUntilItEnds(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store
		t0 := clock.Now()
		claim := func(token string) []outbox.Record {
			t.Helper()
			recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: clock.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
			if err != nil {
				t.Fatal(err)
			}
			return recs
		}
		first := sc.enqueue(t, outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("first")}})
		if got := claim("a"); len(got) != 1 {
			t.Fatalf("claim a: %d rows", len(got))
		}
		hold := func(token string, until time.Duration) int {
			t.Helper()
			dead, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: token, Now: clock.Now(), Until: t0.Add(until), MaxDeferral: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			return dead
		}
		hold("a", 30*time.Second)
		if n, err := s.Defer(ctx, outbox.Deferral{Token: "a", IDs: first, Now: clock.Now()}); n != 1 || err != nil {
			t.Fatalf("Defer = %d, %v", n, err)
		}
		clock.Advance(10 * time.Minute)
		if got := claim("probe"); len(got) != 1 || !got[0].Probe {
			t.Fatalf("claim after the hold: %+v; want the probe", got)
		}
		if dead := hold("probe", 20*time.Minute); dead != 1 {
			t.Fatalf("Hold after 10 minutes made %d rows dead, want 1", dead)
		}
		clock.Advance(time.Second)
		if got := claim("empty"); len(got) != 0 { // orders has no pending row now, its hold lasts
			t.Fatalf("claim with no pending row: %d rows", len(got))
		}
		later := sc.enqueue(t, outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("later")}})
		clock.Advance(time.Second)
		if got := claim("during"); len(got) != 0 {
			t.Fatalf("claim during the hold took %d rows (%+v); want none: orders is held until +20m", len(got), got)
		}
		clock.Set(t0.Add(20 * time.Minute))
		got := claim("after")
		if len(got) != 1 || got[0].ID != later[0] || !got[0].Probe {
			t.Fatalf("claim after the hold: %+v; want the later row as the probe", got)
		}
	})
}

// A broker's error text may quote the message's bytes (not UTF-8, NUL included) or
// be long enough to be cut inside a multi-byte character; last_error is text, so the
// failure must still be recorded, or the row would never fail, never die, and its
// batch would come back and fail to be written back forever.
func TestFailureWithErrorTextThatIsNotUTF8IsRecorded(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		errs := map[string]error{
			"binary": errors.New("refused key \xff\xfe\x00 by the broker"),
			"cut":    errors.New(strings.Repeat("a", 1003) + "é and more"), // é at bytes 1023-1024 of the last error,
		}
		pub := publisherFunc(func(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
			return errs[string(msgs[0].Value)]
		})
		proc, err := outbox.NewProcessor(sc.store, nil, pub, outbox.WithClock(clock), outbox.WithMaxAttempts(1),
			outbox.WithClassifier(func(error) breaker.Outcome { return breaker.Neutral }))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"binary", "cut"} {
			id := sc.enqueue(t, outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte(name)}})[0]
			rep, err := proc.ProcessPending(ctx)
			if err != nil {
				t.Fatalf("%s: ProcessPending: %v", name, err)
			}
			if got := rep.Total().Dead; got != 1 {
				t.Errorf("%s: %d rows dead, want 1", name, got)
			}
			r := sc.get(t, id)
			if r.Status != outbox.StatusDead || !strings.HasPrefix(r.LastError, outbox.ReasonAttemptsExhausted+": ") ||
				!utf8.ValidString(r.LastError) || strings.IndexByte(r.LastError, 0) >= 0 {
				t.Errorf("%s: row %s, last error %q", name, r.Status, r.LastError)
			}
		}
	})
}

// Replicas claiming at the same instant after a hold ended take one probe between
// them, never the destination's other rows; the probe's failure holds it again.
func TestConcurrentClaimsTakeOneProbe(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		s := sc.store
		entries := make([]outbox.Entry, 50)
		for i := range entries {
			entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("o")}}
		}
		sc.enqueue(t, entries...)
		if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: "x", Now: clock.Now(), Until: clock.Now().Add(time.Second), MaxDeferral: time.Hour}); err != nil {
			t.Fatal(err)
		}
		const replicas = 8
		for round := range 10 {
			clock.Advance(2 * time.Second)
			var (
				wg    sync.WaitGroup
				mu    sync.Mutex
				got   []outbox.Record
				owner string
			)
			startGate := make(chan struct{})
			for i := range replicas {
				wg.Add(1)
				go func() {
					defer wg.Done()
					<-startGate
					token := fmt.Sprintf("r%d-%d", round, i)
					recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: clock.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
					if err != nil {
						t.Error(err)
					}
					mu.Lock()
					defer mu.Unlock()
					got = append(got, recs...)
					if len(recs) > 0 {
						owner = token
					}
				}()
			}
			close(startGate)
			wg.Wait()
			if len(got) != 1 || !got[0].Probe {
				t.Fatalf("round %d: %d rows claimed by %d replicas; want one probe", round, len(got), replicas)
			}
			if _, err := s.Hold(ctx, outbox.Hold{Destination: orders, Token: owner, Now: clock.Now(), Until: clock.Now().Add(time.Second), MaxDeferral: time.Hour}); err != nil {
				t.Fatal(err)
			}
			if n, err := s.Defer(ctx, outbox.Deferral{Token: owner, IDs: []int64{got[0].ID}, Now: clock.Now()}); n != 1 || err != nil {
				t.Fatalf("Defer = %d, %v", n, err)
			}
		}
	})
}

// A negative limit is bad input: both stores refuse it with an error naming it
// (the memory store used to panic slicing its rows).
func TestDeleteSettledRefusesANegativeLimit(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		settleRows(t, sc, clock, []struct {
			dest transport.Destination
			end  string
		}{{orders, "published"}, {orders, "boom"}})
		clock.Advance(time.Hour)
		n, err := sc.store.(admin).DeleteSettled(context.Background(), clock.Now(), clock.Now(), -1)
		if n != 0 || err == nil || !strings.Contains(err.Error(), "limit -1") {
			t.Errorf("DeleteSettled(limit -1) = %d, %v; want an error naming the limit", n, err)
		}
	})
}

// dyingStore stands for a dispatcher killed at one step: from the call named die on,
// nothing it writes reaches the store.
type dyingStore struct {
	outbox.Store
	die  string
	dead bool
}

var errKilled = errors.New("killed")

func (s *dyingStore) at(step string) bool { s.dead = s.dead || step == s.die; return s.dead }

func (s *dyingStore) Defer(ctx context.Context, d outbox.Deferral) (int, error) {
	if s.at("defer") {
		return 0, errKilled
	}
	return s.Store.Defer(ctx, d)
}

func (s *dyingStore) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error) {
	if s.at("mark") {
		return 0, errKilled
	}
	return s.Store.MarkPublished(ctx, token, now, ids)
}

func (s *dyingStore) Hold(ctx context.Context, h outbox.Hold) (int, error) {
	if s.at("hold") {
		return 0, errKilled
	}
	return s.Store.Hold(ctx, h)
}

// A dispatcher killed after its claim, between its Hold and the deferral write-back,
// or after a publish before recording it, loses no row and charges no attempt:
// another dispatcher publishes every row once the lease and the hold have ended.
func TestKilledMidDispatchLosesNothing(t *testing.T) {
	for _, step := range []string{"hold", "defer", "mark"} {
		t.Run(step, func(t *testing.T) {
			onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
				ctx := context.Background()
				entries := make([]outbox.Entry, 20)
				for i := range entries {
					entries[i] = outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte{byte('a' + i%3)}, Value: []byte{byte(i)}}}
				}
				ids := sc.enqueue(t, entries...)
				down := step != "mark"
				failing := publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error {
					if down {
						return errDown
					}
					return nil
				})
				dying, err := outbox.NewProcessor(&dyingStore{Store: sc.store, die: step}, nil, failing,
					outbox.WithClock(clock), outbox.WithClassifier(testClassify))
				if err != nil {
					t.Fatal(err)
				}
				if _, err := dying.ProcessPending(ctx); !errors.Is(err, errKilled) {
					t.Fatalf("the dying dispatcher's batch: %v", err)
				}
				published := map[int64]int{}
				pub := publisherFunc(func(_ context.Context, _ transport.Destination, msgs ...transport.Message) error {
					for _, m := range msgs {
						published[ids[m.Value[0]]]++
					}
					return nil
				})
				other, err := outbox.NewProcessor(sc.store, nil, pub, outbox.WithClock(clock), outbox.WithClassifier(testClassify))
				if err != nil {
					t.Fatal(err)
				}
				for range 100 {
					if _, err := other.ProcessPending(ctx); err != nil {
						t.Fatal(err)
					}
					clock.Advance(time.Second)
				}
				for i, id := range ids {
					r := sc.get(t, id)
					if r.Status != outbox.StatusPublished || r.Attempts != 0 || published[id] != 1 {
						t.Errorf("row %d: %s, %d attempts, published %d times", i, r.Status, r.Attempts, published[id])
					}
				}
			})
		})
	}
}

// BacklogByDestination reads the Store's own table (WithTable), not the default one.
func TestBacklogByDestinationReadsItsOwnTable(t *testing.T) {
	e := newEnv(t, nil)
	ctx := context.Background()
	tbl, err := postgres.NewTableName("", "svc_outbox")
	if err != nil {
		t.Fatal(err)
	}
	if err := postgres.Migrate(ctx, e.pool, postgres.WithTable(tbl)); err != nil {
		t.Fatal(err)
	}
	own := postgres.New(e.pool, postgres.WithTable(tbl))
	enqueueOn(t, e, e.store, 3) // the default table's
	enqueueOn(t, e, own, 1)
	for _, tc := range []struct {
		s    *postgres.Store
		want int64
	}{{e.store, 3}, {own, 1}} {
		got, err := tc.s.BacklogByDestination(ctx)
		if err != nil || len(got) != 1 || got[0].Destination != orders || got[0].Pending != tc.want {
			t.Errorf("BacklogByDestination = %+v, %v; want %d rows for %s", got, err, tc.want, orders)
		}
	}
}
