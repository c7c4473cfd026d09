package natsguard_test

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// A full stream (MaxMsgs with DiscardNew) holds its rows in the PostgreSQL outbox as
// unusable for ten minutes of the outbox's clock: no row spends an attempt, and each
// hold sends one row as its probe, not the batch. Once the stream is purged (room
// for six) every row goes out once, in order, with its row's id as its Nats-Msg-Id.
func TestOutboxHoldsAFullStreamWithoutSpendingAttempts(t *testing.T) {
	ctx := context.Background()
	e := newEnv(t, machine(t), breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, nil)
	d, subj := newStream(t, e.js, "outbox", jetstream.StreamConfig{MaxMsgs: 6, Discard: jetstream.DiscardNew})
	fill(t, e.js, subj("earlier"), 1, 6)

	pool, err := pgxpool.New(ctx, harness.PostgresSchema(t))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool, postgres.WithClock(e.clock))
	entries := make([]outbox.Entry, 5)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Key: []byte(subj("orders")), Value: []byte(strconv.Itoa(i))}}
	}
	var ids []int64
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		ids, err = store.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	proc, err := outbox.NewProcessor(store, e.reg, e.p, outbox.WithClock(e.clock), outbox.WithDeferralJitter(0),
		outbox.WithMaxAttempts(2)) // the classifier is the publisher's
	if err != nil {
		t.Fatal(err)
	}

	begin, holds := e.clock.Now(), 0
	for e.clock.Now().Sub(begin) < 10*time.Minute {
		if _, err := proc.ProcessPending(ctx); err != nil {
			t.Fatal(err)
		}
		hs, err := store.Holds(ctx)
		if err != nil || len(hs) != 1 || hs[0].Destination != d || !strings.Contains(hs[0].Unusable, "maximum messages exceeded") {
			t.Fatalf("holds %+v, %v: want %s held as unusable (the stream is full)", hs, err, d)
		}
		holds++
		e.clock.Set(hs[0].Until)
	}
	for _, id := range ids {
		r, err := store.Get(ctx, id)
		if err != nil || r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Fatalf("row %d while the stream is full: %+v, %v", id, r, err)
		}
	}
	calls := e.calls(d).Total()
	t.Logf("%d holds over %v of the outbox's clock, %d calls to the full stream", holds, e.clock.Now().Sub(begin), calls)
	if calls != uint64(holds) {
		t.Errorf("%d calls for %d holds: each hold sends one probe row", calls, holds)
	}
	if n := stored(t, e.js, d); n != 6 {
		t.Fatalf("the full stream holds %d messages", n)
	}

	s, err := e.js.Stream(ctx, d.Name)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Purge(ctx); err != nil {
		t.Fatal(err)
	}
	for range 10 { // the hold's end, the probe, then the rest
		if _, err := proc.ProcessPending(ctx); err != nil {
			t.Fatal(err)
		}
		e.clock.Advance(time.Minute)
	}
	for _, id := range ids {
		if r, err := store.Get(ctx, id); err != nil || r.Status != outbox.StatusPublished || r.Attempts != 0 {
			t.Fatalf("row %d after the purge: %+v, %v", id, r, err)
		}
	}
	info, err := s.Info(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if info.State.Msgs != uint64(len(ids)) {
		t.Fatalf("the stream holds %d messages, want %d", info.State.Msgs, len(ids))
	}
	for i, id := range ids {
		m, err := s.GetMsg(ctx, info.State.FirstSeq+uint64(i))
		if err != nil {
			t.Fatal(err)
		}
		if got := m.Header.Get(jetstream.MsgIDHeader); got != strconv.FormatInt(id, 10) || string(m.Data) != strconv.Itoa(i) {
			t.Errorf("message %d: id %q, data %q; want row %d's", i, got, m.Data, id)
		}
	}
}
