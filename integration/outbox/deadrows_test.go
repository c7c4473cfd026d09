package outbox_test

import (
	"context"
	"encoding/json"
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
	"time"

	adminapi "github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// TestDeadRowsPageReadsNoPayload: dead rows are where oversized messages end up, and
// the dead-rows page shows only their sizes; serving it must not read the payloads
// (8 rows of 4 MiB used to cost 32 MiB or more per request, without a token).
func TestDeadRowsPageReadsNoPayload(t *testing.T) {
	onBothStores(t, func(t *testing.T, clock *fakeclock.Clock, sc storeCase) {
		ctx := context.Background()
		const rows, size = 8, 4 << 20
		entries := make([]outbox.Entry, rows)
		for i := range entries {
			// AMQP: RabbitMQ takes messages of 4 MiB (storekit.DefaultMaxEntryBytes).
			entries[i] = outbox.Entry{Destination: transport.Destination{Broker: "amqp", Name: "orders"},
				Message: transport.Message{Key: []byte{'k', byte('0' + i)}, Value: make([]byte, size)}}
		}
		ids := sc.enqueue(t, entries...)
		claimed, err := sc.store.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: clock.Now(), Limit: rows, Lease: time.Minute})
		if err != nil || len(claimed) != rows {
			t.Fatalf("Claim = %d rows, %v", len(claimed), err)
		}
		var dead []outbox.Failure
		for _, id := range ids {
			dead = append(dead, outbox.Failure{ID: id, RetryAt: clock.Now(), Dead: true, Err: outbox.ReasonAttemptsExhausted + ": message too large"})
		}
		if _, n, err := sc.store.Fail(ctx, "t", dead); n != rows || err != nil {
			t.Fatalf("Fail = %d dead, %v", n, err)
		}
		claimed = nil
		runtime.GC()

		reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Second}})
		if err != nil {
			t.Fatal(err)
		}
		h, err := adminapi.New(reg, adminapi.WithOutbox(sc.store.(adminapi.Outbox)))
		if err != nil {
			t.Fatal(err)
		}
		req := httptest.NewRequest("GET", "/api/outbox/dead?limit=500", nil)
		req.Host = "localhost"
		w := httptest.NewRecorder()
		var before, after runtime.MemStats
		runtime.ReadMemStats(&before)
		h.ServeHTTP(w, req)
		runtime.ReadMemStats(&after)
		var page adminapi.DeadPage
		if err := json.Unmarshal(w.Body.Bytes(), &page); err != nil || w.Code != 200 {
			t.Fatalf("GET /api/outbox/dead: %d %s", w.Code, w.Body)
		}
		if len(page.Rows) != rows || page.Rows[0].ValueBytes != size || page.Rows[0].Key != "k0" {
			t.Fatalf("page: %d rows, first %+v", len(page.Rows), page.Rows[0])
		}
		alloc := after.TotalAlloc - before.TotalAlloc
		t.Logf("serving %d dead rows of %d MiB allocated %.2f MiB", rows, size>>20, float64(alloc)/(1<<20))
		if alloc > size {
			t.Fatalf("serving %d dead rows of %d MiB allocated %.1f MiB; want less than one payload", rows, size>>20, float64(alloc)/(1<<20))
		}
	})
}

// TestDeadFiltersThatMatchNothingReadNothing: with 300,000 dead rows, a dead-row page
// or requeue whose filter matches none of them (a reason, a destination, both, or ids)
// reads the index that fits the filter's shape, not every dead row, whatever the
// statistics say and in custom and generic plans.
func TestDeadFiltersThatMatchNothingReadNothing(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	cap := &capture{}
	pool := newPool(t, dsn, cap)
	ctx := context.Background()
	if err := postgres.Migrate(ctx, pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "ALTER TABLE "+postgres.Table+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, `INSERT INTO `+postgres.Table+` (destination, payload, created_at, visible_after, status, last_error, settled_at)
		SELECT 'kafka:orders', '\x00'::bytea, now(), now(), 'dead',
			CASE WHEN i % 3 = 0 THEN 'undecodable: bad header' ELSE 'attempts_exhausted: message too large' END, now()
		FROM generate_series(1, 300000) AS i`); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(pool)
	orders, refunds := transport.Destination{Broker: "kafka", Name: "orders"}, transport.Destination{Broker: "kafka", Name: "refunds"}
	index := func(name string) string { return " on " + postgres.Table + " using " + postgres.Table + name }
	byDestination, byDestinationReason := index("_dead_dest"), index("_dead_dest_rsn")
	cases := []struct {
		name  string
		f     outbox.DeadFilter
		index string
	}{
		{"reason", outbox.DeadFilter{Reason: "circuit_deferral_exhausted"}, index("_dead_reason")},
		{"destination", outbox.DeadFilter{Destination: refunds}, byDestination}, // or _dead_dest_rsn (fits)
		{"destination and reason", outbox.DeadFilter{Destination: orders, Reason: "circuit_deferral_exhausted"}, byDestinationReason},
		{"reason and destination", outbox.DeadFilter{Destination: refunds, Reason: "undecodable"}, byDestinationReason},
		{"ids", outbox.DeadFilter{IDs: []int64{400001, 400002}}, index("_pkey")},
	}
	recorded := map[string][]captured{}
	for _, c := range cases {
		recorded[c.name] = []captured{
			cap.record(t, "DeadSummaries", func() error { _, err := store.DeadSummaries(ctx, c.f, outbox.Page{Limit: 100}); return err }),
			cap.record(t, "DeadRows", func() error { _, err := store.DeadRows(ctx, c.f, outbox.Page{Limit: 100}); return err }),
			cap.record(t, "Requeue", func() error { _, err := store.Requeue(ctx, c.f, time.Now()); return err }),
		}
	}
	conn, err := pool.Acquire(ctx) // explain deallocates its prepared statements: kept to the end
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Release()
	// The rows are found along the filter's index (an index or a bitmap scan of it);
	// Requeue's UPDATE then reaches each row it picked by its primary key. explain
	// spells a scan as "<kind> on <table> using <index>", followed by its index
	// condition in brackets when it has one.
	is := func(scan, want string) bool { return scan == want || strings.HasPrefix(scan, want+" [") }
	fits := func(index string, i int, scans []string) bool {
		if index == byDestination && len(scans) > 0 && strings.Contains(scans[0], byDestinationReason+" [(destination") {
			index = byDestinationReason // the destination's part of the index on both serves as well
		}
		if len(scans) == 0 || !is(scans[0], "Index Scan"+index) && !is(scans[0], "Bitmap Index Scan"+index) {
			return false
		}
		rest := scans[1:]
		return len(rest) == 0 || i == 2 && len(rest) == 1 && is(rest[0], "Index Scan on "+postgres.Table+" using "+postgres.Table+"_pkey")
	}
	for _, analysed := range []bool{false, true} {
		if analysed {
			if _, err := conn.Exec(ctx, "ANALYZE "+postgres.Table); err != nil {
				t.Fatal(err)
			}
		}
		for _, c := range cases {
			for i, s := range recorded[c.name] {
				for _, generic := range []bool{false, true} {
					scans, _, text := explain(t, conn, s, generic)
					if !fits(c.index, i, scans) {
						t.Errorf("%s: statement %d (analysed %v, generic %v) scans %v; want%s\n%s", c.name, i, analysed, generic, scans, c.index, text)
					}
				}
			}
		}
	}
	page, err := store.DeadSummaries(ctx, outbox.DeadFilter{Reason: "undecodable"}, outbox.Page{Limit: 3})
	if err != nil || len(page) != 3 || page[0].LastError != "undecodable: bad header" || page[0].ValueBytes != 1 || page[0].ID != 3 {
		t.Fatalf("a matching page: %+v, %v", page, err)
	}
}
