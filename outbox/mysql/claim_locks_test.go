package mysql_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
	"github.com/brokerguard/brokerguard/transport"
)

// A claim's locks, held until it commits, never hold up an application's insert: the
// application's transaction (at the server's default level, REPEATABLE READ) inserts
// rows of the destination and key the claim is taking, with a lock wait of one
// second, while the claim's transaction is still open. The same statements run at
// REPEATABLE READ do hold it up (the gap after the rows they lock, where new rows
// go): that is why Claim runs at READ COMMITTED.
func TestAnOpenClaimDoesNotHoldUpInserts(t *testing.T) {
	for _, c := range []struct {
		level   sql.IsolationLevel
		blocked bool
	}{{bgmysql.ClaimIsolation, false}, {sql.LevelRepeatableRead, true}} {
		t.Run(c.level.String(), func(t *testing.T) {
			s, db := testStore(t)
			ctx := context.Background()
			keyed := outbox.Entry{Destination: orders, Message: transport.Message{Key: []byte("k"), Value: []byte("v")}}
			if _, err := s.Enqueue(ctx, db, keyed, keyed, outbox.Entry{Destination: orders}); err != nil {
				t.Fatal(err)
			}
			claim, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: c.level})
			if err != nil {
				t.Fatal(err)
			}
			defer claim.Rollback()
			recs, err := s.ClaimIn(ctx, claim, outbox.ClaimRequest{Token: "c", Now: time.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
			if err != nil || len(recs) != 3 {
				t.Fatalf("claim: %d rows, %v; want 3", len(recs), err)
			}
			app, err := db.Conn(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer app.Close()
			if _, err := app.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 1"); err != nil {
				t.Fatal(err)
			}
			tx, err := app.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelRepeatableRead})
			if err != nil {
				t.Fatal(err)
			}
			defer tx.Rollback()
			_, err = s.Enqueue(ctx, tx, keyed, outbox.Entry{Destination: orders})
			var me *mysql.MySQLError
			switch {
			case c.blocked && !(errors.As(err, &me) && me.Number == 1205):
				t.Fatalf("an insert while the claim is open at %v: %v; want a lock wait timeout (1205)", c.level, err)
			case !c.blocked && err != nil:
				t.Fatalf("an insert while the claim is open: %v", err)
			}
			if err := claim.Commit(); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A claim bounds its lock waits on the server to the Store's timeout and gives the
// connection back with the settings it had; a claim that waited for the claims'
// lock past its timeout is an error, and the one after it works.
func TestClaimBoundsItsLockWaitsAndRestoresThem(t *testing.T) {
	_, db := testStore(t)
	db.SetMaxOpenConns(1) // every call of the Store runs on the same connection
	s, err := bgmysql.New(db, bgmysql.WithTimeout(time.Second))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	settings := func() (rows, mdl int) {
		t.Helper()
		if err := db.QueryRowContext(ctx, "SELECT @@SESSION.innodb_lock_wait_timeout, @@SESSION.lock_wait_timeout").Scan(&rows, &mdl); err != nil {
			t.Fatal(err)
		}
		return rows, mdl
	}
	if _, err := db.ExecContext(ctx, "SET SESSION innodb_lock_wait_timeout = 37, SESSION lock_wait_timeout = 41"); err != nil {
		t.Fatal(err)
	}
	claim := func() error {
		_, err := s.Claim(ctx, outbox.ClaimRequest{Token: "c", Now: time.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
		return err
	}
	if err := claim(); err != nil {
		t.Fatal(err)
	}
	if r, m := settings(); r != 37 || m != 41 {
		t.Fatalf("after a claim the connection waits %d s for row locks and %d s for metadata locks; want 37 and 41 as before", r, m)
	}

	holderDB := openDBLike(t, db)
	holder, err := holderDB.BeginTx(ctx, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Rollback()
	if _, err := holder.ExecContext(ctx, "SELECT name FROM "+bgmysql.Table+"_lock FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	err = claim()
	var me *mysql.MySQLError
	if !errors.Is(err, context.DeadlineExceeded) && !(errors.As(err, &me) && me.Number == 1205) {
		t.Fatalf("a claim while the claims' lock is held: %v; want the Store's deadline or the server's lock wait timeout (1205)", err)
	}
	if err := holder.Rollback(); err != nil {
		t.Fatal(err)
	}
	if err := claim(); err != nil {
		t.Fatalf("the claim after: %v", err)
	}
	if r, m := settings(); r == 1 || m == 1 {
		t.Fatalf("after a claim that failed the connection waits %d s for row locks and %d s for metadata locks: the claim's bound stayed", r, m)
	}
}
