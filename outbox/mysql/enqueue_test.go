package mysql_test

import (
	"bytes"
	"context"
	"database/sql"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/transport"
)

// An Enqueue of more rows than one INSERT takes returns every id, in entry order,
// each naming its own entry's row.
func TestEnqueueReturnsTheIDsOfEveryChunk(t *testing.T) {
	s, db := testStore(t)
	ctx := context.Background()
	es := make([]outbox.Entry, 2500)
	for i := range es {
		es[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte{byte(i), byte(i >> 8)}}}
	}
	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	ids, err := s.Enqueue(ctx, tx, es...)
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(tx); err != nil {
		t.Fatal(err)
	}
	if len(ids) != len(es) {
		t.Fatalf("%d ids for %d entries", len(ids), len(es))
	}
	for _, i := range []int{0, 1, 999, 1000, 1001, 2499} {
		r, err := s.Get(ctx, ids[i])
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(r.Message.Value, es[i].Message.Value) {
			t.Errorf("id %d (entry %d) holds %v, want %v", ids[i], i, r.Message.Value, es[i].Message.Value)
		}
	}
}

// The stored times are the clock's, whatever the connection's time zone, its
// parseTime and its loc: a row written through one connection set-up reads the same
// through another.
func TestTimesDoNotDependOnTheConnectionsZone(t *testing.T) {
	utc := testDB(t)
	if err := bgmysql.Migrate(context.Background(), utc); err != nil {
		t.Fatal(err)
	}
	var name string
	if err := utc.QueryRow("SELECT DATABASE()").Scan(&name); err != nil {
		t.Fatal(err)
	}
	at := time.Date(2030, 6, 1, 12, 0, 0, 123456000, time.FixedZone("X", -7*3600))
	clock := fixedClock{at}
	for _, params := range [][]string{
		nil,
		{"parseTime", "true", "loc", "Asia/Tokyo", "time_zone", "'+09:00'"},
		{"parseTime", "false", "time_zone", "'-05:00'"},
	} {
		db := openDB(t, name, params...)
		s, err := bgmysql.New(db, bgmysql.WithClock(clock))
		if err != nil {
			t.Fatal(err)
		}
		ids, err := s.Enqueue(context.Background(), db, outbox.Entry{Destination: orders})
		if err != nil {
			t.Fatalf("%v: %v", params, err)
		}
		for _, reader := range []*bgmysql.Store{s, mustNew(t, utc)} {
			r, err := reader.Get(context.Background(), ids[0])
			if err != nil {
				t.Fatal(err)
			}
			if !r.CreatedAt.Equal(at) || !r.VisibleAfter.Equal(at) {
				t.Errorf("written with %v: created %v, visible %v; want %v", params, r.CreatedAt, r.VisibleAfter, at)
			}
		}
	}
}

type fixedClock struct{ t time.Time }

func (c fixedClock) Now() time.Time { return c.t }

func mustNew(t *testing.T, db *sql.DB) *bgmysql.Store {
	t.Helper()
	s, err := bgmysql.New(db)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
