package postgres_test

import (
	"context"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// A relay whose session's connection is gone (its process killed, its host lost) has
// its rows taken by the next claim of another relay, long before their lease ends,
// and its record removed; the rows of a relay whose session lives stay leased.
func TestAGoneSessionsRowsAreFreedByTheNextClaim(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	var entries []outbox.Entry
	for _, k := range []string{"a", "a", "b"} {
		entries = append(entries, outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte(k), Value: []byte("v")}})
	}
	ids := pgEnqueue(ctx, t, s, pool, entries...)
	now := time.Now()
	claim := func(token string, limit int) []outbox.Record {
		t.Helper()
		recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: now, Limit: limit, Lease: time.Hour, ProbeLimit: 1})
		if err != nil {
			t.Fatalf("Claim(%s): %v", token, err)
		}
		return recs
	}
	endLive, err := s.Session(ctx, "live/1/")
	if err != nil {
		t.Fatal(err)
	}
	defer endLive()
	if _, err := s.Session(ctx, "doomed/1/"); err != nil { // never ended: its connection is killed below
		t.Fatal(err)
	}
	if got := claim("doomed/1/1", 2); len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[1] {
		t.Fatalf("the doomed relay's claim: %+v", got)
	}
	if got := claim("live/1/1", 1); len(got) != 1 || got[0].ID != ids[2] {
		t.Fatalf("the live relay's claim: %+v", got)
	}
	if got := claim("other/1/1", 10); len(got) != 0 {
		t.Fatalf("a claim while both sessions live took %+v", got)
	}
	// Kill the doomed relay's session connection, as a kill -9 of its process would
	// end it, and wait until the server has let its lock go.
	if _, err := pool.Exec(ctx, `SELECT pg_terminate_backend(l.pid) FROM pg_locks l JOIN `+postgres.Table+`_relay r
		ON l.locktype = 'advisory' AND l.classid = 7362891 AND l.objid = r.lock_key::oid AND l.objsubid = 2
		WHERE r.prefix = 'doomed/1/'`); err != nil {
		t.Fatal(err)
	}
	for held := 1; held > 0; {
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN `+postgres.Table+`_relay r
			ON l.locktype = 'advisory' AND l.classid = 7362891 AND l.objid = r.lock_key::oid WHERE r.prefix = 'doomed/1/'`).Scan(&held); err != nil {
			t.Fatal(err)
		}
	}
	if got := claim("other/1/2", 10); len(got) != 2 || got[0].ID != ids[0] || got[1].ID != ids[1] {
		t.Fatalf("the claim after the doomed relay's connection was killed took %+v; want its 2 rows, within their hour's lease", got)
	}
	var relays []string
	rows, err := pool.Query(ctx, `SELECT prefix FROM `+postgres.Table+`_relay ORDER BY prefix`)
	if err != nil {
		t.Fatal(err)
	}
	for rows.Next() {
		var p string
		if err := rows.Scan(&p); err != nil {
			t.Fatal(err)
		}
		relays = append(relays, p)
	}
	if len(relays) != 1 || relays[0] != "live/1/" {
		t.Fatalf("relays recorded after the claim: %v, want only the live one", relays)
	}
	if n, err := s.MarkPublished(ctx, "live/1/1", now, ids[2:]); n != 1 || err != nil {
		t.Fatalf("the live relay's write-back: %d, %v", n, err)
	}
}
