package outbox_test

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/transport"
)

// obUnusableHooks records dispatches and every RecordUnusable call.
type obUnusableHooks struct {
	recordingHooks
	mu      sync.Mutex
	reasons []string
}

func (h *obUnusableHooks) RecordUnusable(d transport.Destination, reason string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.reasons = append(h.reasons, d.Name+": "+reason)
}

// obBlankForbidden is a forbidden-destination error whose text is empty.
type obBlankForbidden struct{}

func (obBlankForbidden) Error() string { return "" }
func (obBlankForbidden) Unwrap() error { return errForbidden }

// An unusable destination is held for WithUnusableBackoff's delay and each hold is
// told to UnusableHooks with the error's text, or "unusable" when it has none.
func TestUnusableHoldFollowsItsOptionAndIsTold(t *testing.T) {
	hooks := &obUnusableHooks{}
	f := unusableFixture(t, outbox.WithHooks(hooks),
		outbox.WithUnusableBackoff(outbox.Backoff{Initial: 7 * time.Minute, Max: time.Hour, Multiplier: 3}))
	f.enqueue(t, orders, 1)
	errs := []error{errors.Join(errForbidden), obBlankForbidden{}}
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error {
		err := errs[0]
		errs = errs[1:]
		return err
	}
	for i, want := range []time.Duration{7 * time.Minute, 21 * time.Minute} {
		now := f.clock.Now()
		f.process(t)
		until, held := f.store.HeldUntil(orders)
		if !held || until.Sub(now) != want {
			t.Fatalf("hold %d: held %v for %v, want %v", i+1, held, until.Sub(now), want)
		}
		f.clock.Set(until)
	}
	want := []string{"orders: " + errForbidden.Error(), "orders: unusable"}
	if !slices.Equal(hooks.reasons, want) {
		t.Errorf("RecordUnusable got %q, want %q", hooks.reasons, want)
	}
	hs, err := f.store.Holds(context.Background())
	if err != nil || len(hs) != 1 || hs[0].Unusable != "unusable" {
		t.Errorf("holds %+v (%v), want orders held as unusable", hs, err)
	}
}

// The ids the publisher is given are the prefix and the row's id; the id header is
// added after the message's own headers, which stay as they were.
func TestMessageIDPrefixAndIDHeader(t *testing.T) {
	f := newFixture(t, policy, outbox.WithMessageIDPrefix("tbl-"), outbox.WithIDHeader("outbox-id"))
	var gotIDs []string
	f.inner.fn = func(ctx context.Context, _ transport.Destination, _ []transport.Message) error {
		gotIDs = transport.MessageIDs(ctx)
		return nil
	}
	ids, err := f.store.Enqueue(context.Background(),
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("a"), Headers: []transport.Header{{Key: "trace", Value: []byte("t1")}}}},
		outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte("b")}},
	)
	if err != nil {
		t.Fatal(err)
	}
	f.process(t)
	if want := []string{"tbl-1", "tbl-2"}; ids[0] != 1 || !slices.Equal(gotIDs, want) {
		t.Errorf("publisher got ids %q, want %q", gotIDs, want)
	}
	if len(f.inner.calls) != 1 || len(f.inner.calls[0].Msgs) != 2 {
		t.Fatalf("calls %+v, want one of two messages", f.inner.calls)
	}
	msgs := f.inner.calls[0].Msgs
	if h := msgs[0].Headers; len(h) != 2 || h[0].Key != "trace" || string(h[0].Value) != "t1" || h[1].Key != "outbox-id" || string(h[1].Value) != "1" {
		t.Errorf("first message's headers %+v, want trace=t1 then outbox-id=1", h)
	}
	if h := msgs[1].Headers; len(h) != 1 || h[0].Key != "outbox-id" || string(h[0].Value) != "2" {
		t.Errorf("second message's headers %+v, want outbox-id=2", h)
	}
	if r := f.get(t, ids[0]); len(r.Message.Headers) != 1 {
		t.Errorf("the stored row's headers changed: %+v", r.Message.Headers)
	}
}

// A destination whose hold has ended is probed with WithProbeBatch rows.
func TestProbeBatchSetsTheProbesSize(t *testing.T) {
	f := newFixture(t, policy, outbox.WithProbeBatch(3))
	f.enqueue(t, orders, 5)
	if _, err := f.store.Hold(context.Background(), outbox.Hold{Destination: orders, Token: "x", Now: t0, Until: t0, MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	f.clock.Advance(time.Second)
	f.process(t)
	if len(f.inner.calls) != 1 || len(f.inner.calls[0].Msgs) != 3 {
		t.Fatalf("calls %+v, want one probe of 3 messages", f.inner.calls)
	}
}

// A failed publish is retried after WithBackoff's delay.
func TestBackoffOptionSpacesRetries(t *testing.T) {
	f := unusableFixture(t, outbox.WithBackoff(outbox.Backoff{Initial: 7 * time.Second, Max: time.Hour, Multiplier: 3}))
	ids := f.enqueue(t, orders, 1)
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errors.New("rejected") }
	for _, want := range []time.Duration{7 * time.Second, 21 * time.Second} {
		now := f.clock.Now()
		f.process(t)
		r := f.get(t, ids[0])
		if r.VisibleAfter.Sub(now) != want {
			t.Fatalf("after %d attempts the row is retried after %v, want %v", r.Attempts, r.VisibleAfter.Sub(now), want)
		}
		f.clock.Set(r.VisibleAfter)
	}
}

// A last error longer than the column's bound is cut between runes.
func TestLongErrorIsCutBetweenRunes(t *testing.T) {
	f := unusableFixture(t)
	ids := f.enqueue(t, orders, 1)
	long := "x" + strings.Repeat("é", 600) // 1201 bytes; byte 1024 is inside a rune
	f.inner.fn = func(context.Context, transport.Destination, []transport.Message) error { return errors.New(long) }
	f.process(t)
	r := f.get(t, ids[0])
	if r.LastError != long[:1023] || !utf8.ValidString(r.LastError) {
		t.Errorf("last error of %d bytes (valid %v), want the first 1023 bytes", len(r.LastError), utf8.ValidString(r.LastError))
	}
}

// obRewriteStore is a memory store whose claims hand the Processor rows as edit
// changes them (a store that could not decode a row, a destination written by hand).
type obRewriteStore struct {
	*memory.Store
	edit func(*outbox.Record)
}

func (s obRewriteStore) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	recs, err := s.Store.Claim(ctx, r)
	for i := range recs {
		s.edit(&recs[i])
	}
	return recs, err
}

// obRewriteFixture is a fixture whose store rewrites claimed rows with edit.
func obRewriteFixture(t *testing.T, edit func(*outbox.Record)) *fixture {
	t.Helper()
	f := newFixture(t, policy)
	var err error
	f.proc, err = outbox.NewProcessor(obRewriteStore{f.store, edit}, f.reg, f.reg.Guard(f.inner, nil), outbox.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// Rows the store could not decode are dead at once, each with its own reason; the
// others go out.
func TestUndecodableRowsAreDeadEachWithItsReason(t *testing.T) {
	f := obRewriteFixture(t, func(r *outbox.Record) {
		if r.ID != 2 {
			r.Undecodable = "bad row " + string(rune('0'+r.ID))
		}
	})
	ids := f.enqueue(t, orders, 3)
	rep := f.process(t)
	if c := rep.ByDestination[orders]; c.Dead != 2 || c.Published != 1 {
		t.Errorf("counts %+v, want 2 dead and 1 published", c)
	}
	for _, id := range []int64{ids[0], ids[2]} {
		if r := f.get(t, id); r.Status != outbox.StatusDead || r.LastError != outbox.ReasonUndecodable+": bad row "+string(rune('0'+id)) {
			t.Errorf("row %d: %s, %q; want dead as undecodable with its reason", id, r.Status, r.LastError)
		}
	}
	if r := f.get(t, ids[1]); r.Status != outbox.StatusPublished {
		t.Errorf("the decodable row is %s", r.Status)
	}
}

// A row whose destination is not valid is dead at once, with the reason.
func TestInvalidDestinationRowIsDead(t *testing.T) {
	f := obRewriteFixture(t, func(r *outbox.Record) { r.Destination.Name = "" })
	ids := f.enqueue(t, orders, 2)
	f.process(t)
	for _, id := range ids {
		if r := f.get(t, id); r.Status != outbox.StatusDead || !strings.HasPrefix(r.LastError, outbox.ReasonInvalidDestination+": ") || r.Attempts != 1 {
			t.Errorf("row %d: %s, %q, %d attempts; want dead as an invalid destination", id, r.Status, r.LastError, r.Attempts)
		}
	}
	if len(f.inner.calls) != 0 {
		t.Errorf("%d publishes to an invalid destination", len(f.inner.calls))
	}
}
