package mysql_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
)

// Migrate can run any number of times, from many processes at once.
func TestMigrateTwiceAndConcurrently(t *testing.T) {
	db := testDB(t)
	ctx := context.Background()
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() { errs <- bgmysql.Migrate(ctx, db) })
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		if err != nil {
			t.Fatalf("concurrent Migrate: %v", err)
		}
	}
	if err := bgmysql.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate over current tables: %v", err)
	}
	s, err := bgmysql.New(db)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, db, entries(1)...); err != nil {
		t.Fatalf("Enqueue after the migrations: %v", err)
	}
}

// During a rolling deploy another session may hold the table (a LOCK TABLES, a long
// transaction before an ALTER): Migrate over current tables runs no DDL and so waits
// for nothing, and Migrate that has DDL to run waits for the table's metadata lock at
// most its timeout (lock_wait_timeout), failing rather than queueing every later
// statement on the table behind it.
func TestMigrateDuringADeploy(t *testing.T) {
	db := testDB(t)
	ctx := context.Background()
	if err := bgmysql.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	holder, err := openDBLike(t, db).Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	if _, err := holder.ExecContext(ctx, "LOCK TABLES "+bgmysql.Table+" WRITE"); err != nil {
		t.Fatal(err)
	}
	if err := bgmysql.Migrate(ctx, db, bgmysql.WithTimeout(time.Second)); err != nil {
		t.Fatalf("Migrate over current tables while another session holds one: %v", err)
	}
	if _, err := holder.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}

	// An older schema: Migrate has DDL to run.
	if _, err := db.ExecContext(ctx, "ALTER TABLE "+bgmysql.Table+"_hold COMMENT = 'brokerguard outbox, schema 0'"); err != nil {
		t.Fatal(err)
	}
	if _, err := holder.ExecContext(ctx, "LOCK TABLES "+bgmysql.Table+"_hold WRITE"); err != nil {
		t.Fatal(err)
	}
	err = bgmysql.Migrate(ctx, db, bgmysql.WithTimeout(time.Second))
	var me *mysql.MySQLError
	if !errors.As(err, &me) || me.Number != 1205 {
		t.Fatalf("Migrate with DDL to run while another session holds the table: %v; want the metadata lock wait's timeout (1205)", err)
	}
	if _, err := holder.ExecContext(ctx, "UNLOCK TABLES"); err != nil {
		t.Fatal(err)
	}
	if err := bgmysql.Migrate(ctx, db); err != nil {
		t.Fatalf("Migrate once the table is free: %v", err)
	}
}

// Two Stores with tables of their own names in one database keep their rows apart.
func TestWithTableKeepsOutboxesApart(t *testing.T) {
	db := testDB(t)
	ctx := context.Background()
	var stores []*bgmysql.Store
	for _, name := range []string{"orders_outbox", "billing_outbox"} {
		if err := bgmysql.Migrate(ctx, db, bgmysql.WithTable(name)); err != nil {
			t.Fatal(err)
		}
		s, err := bgmysql.New(db, bgmysql.WithTable(name))
		if err != nil {
			t.Fatal(err)
		}
		stores = append(stores, s)
	}
	ids, err := stores[0].Enqueue(ctx, db, entries(2)...)
	if err != nil {
		t.Fatal(err)
	}
	if n, _, err := stores[1].Backlog(ctx); n != 0 || err != nil {
		t.Fatalf("the other table's backlog: %d, %v; want 0", n, err)
	}
	recs, err := stores[0].Claim(ctx, outbox.ClaimRequest{Token: "c", Now: time.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	if err != nil || len(recs) != 2 || recs[0].ID != ids[0] {
		t.Fatalf("claim of its own table: %+v, %v", recs, err)
	}
	for _, bad := range []string{"Orders", "1x", "a-b", "x`y", string(make([]byte, 60))} {
		if _, err := bgmysql.New(db, bgmysql.WithTable(bad)); err == nil {
			t.Errorf("WithTable(%q) accepted", bad)
		}
	}
}
