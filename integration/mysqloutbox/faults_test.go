package mysqloutbox_test

import (
	"context"
	"database/sql"
	"errors"
	"testing"
	"time"

	"github.com/go-sql-driver/mysql"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	bgmysql "github.com/brokerguard/brokerguard/outbox/mysql"
)

// mysqlError reports whether err holds a server error of number n.
func mysqlError(err error, n uint16) bool {
	var me *mysql.MySQLError
	return errors.As(err, &me) && me.Number == n
}

// Three relays at the defaults, without an error handler, go through a restart of
// the server (a clean shutdown ends every session): no Run ends, no row is lost, and
// at most a batch per relay goes out twice (published before the restart, marked
// after it could not be).
func TestRelaysSurviveARestart(t *testing.T) {
	m := harness.NewMariaDB(t)
	db, store := open(t, m.DSN())
	if err := bgmysql.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	pub := newRowWatch()
	ids := enqueue(t, db, store, 1500)
	runRelays(t, 3, store, pub, nil)
	pub.atLeast(t, 300)
	if err := m.Restart(); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, enqueue(t, db, store, 300)...)
	pub.all(t, ids)
	if d := pub.duplicates(ids); d > 3*outbox.DefaultBatchSize {
		t.Errorf("%d duplicate publishes; want at most a batch per relay", d)
	}
	t.Logf("all %d rows published; %d duplicates", len(ids), pub.duplicates(ids))
}

// A TCP proxy in front of the server goes silent (connections open, nothing
// answers): every relay reports that a store call ran out of time, rows
// enqueued meanwhile (directly) wait, and once the proxy forwards again every row is
// published.
func TestSilentConnectionIsAnErrorThenRelaysRecover(t *testing.T) {
	const timeout, relays = 2 * time.Second, 3
	m := harness.NewMariaDB(t)
	direct, enqueuer := open(t, m.DSN())
	if err := bgmysql.Migrate(context.Background(), direct); err != nil {
		t.Fatal(err)
	}
	proxy := harness.NewProxy(t, m.Addr())
	cfg, err := mysql.ParseDSN(m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	cfg.Addr, cfg.Timeout = proxy.Addr(), timeout
	_, store := open(t, cfg.FormatDSN(), bgmysql.WithTimeout(timeout))
	t.Cleanup(proxy.Close) // before the pools close
	pub := newRowWatch()
	errs := newRelayErrors(t)
	runRelays(t, relays, store, pub, errs, outbox.WithStoreTimeout(timeout), outbox.WithPollInterval(100*time.Millisecond))

	first := enqueue(t, direct, enqueuer, 200)
	pub.all(t, first)
	mark := errs.mark(relays)
	proxy.BlackHole()
	during := enqueue(t, direct, enqueuer, 200)
	errs.eachSince(t, mark, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) })
	proxy.Forward(m.Addr())
	pub.all(t, during)
	t.Logf("every relay reported the silence; all %d rows enqueued during it published after it; %d duplicates",
		len(during), pub.duplicates(append(first, during...)))
}

// Another session holds the claims' lock row and then some pending rows: while it
// holds the lock every relay's claim ends in an error (its lock wait bounded by the
// store's timeout: the deadline, or the server's lock wait timeout) and inserts go on; while it holds rows, the relays skip them
// (SKIP LOCKED) and publish the others; once it lets go, every row is published.
func TestLockWaitsEndInErrorsAndLockedRowsAreSkipped(t *testing.T) {
	const timeout, relays = time.Second, 3
	m := harness.NewMariaDB(t)
	db, store := open(t, m.DSN(), bgmysql.WithTimeout(timeout))
	if err := bgmysql.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	pub := newRowWatch()
	errs := newRelayErrors(t)
	runRelays(t, relays, store, pub, errs, outbox.WithStoreTimeout(timeout), outbox.WithPollInterval(100*time.Millisecond),
		outbox.WithLease(3*timeout))
	dumpOnFailure(t, db)
	ids := enqueue(t, db, store, 100)
	pub.all(t, ids)
	ctx := context.Background()

	holder, err := db.Conn(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer holder.Close()
	tx, err := holder.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := tx.ExecContext(ctx, "SELECT name FROM "+bgmysql.Table+"_lock FOR UPDATE"); err != nil {
		t.Fatal(err)
	}
	mark := errs.mark(relays)
	blocked := enqueue(t, db, store, 200) // inserts do not wait for the holder
	errs.eachSince(t, mark, func(err error) bool { return errors.Is(err, context.DeadlineExceeded) || mysqlError(err, 1205) })
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	pub.all(t, blocked)

	locked := enqueue(t, db, store, 10)
	free := enqueue(t, db, store, 200)
	tx, err = holder.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelReadCommitted})
	if err != nil {
		t.Fatal(err)
	}
	defer tx.Rollback()
	var n int
	if err := tx.QueryRowContext(ctx, "SELECT COUNT(*) FROM (SELECT id FROM "+bgmysql.Table+" WHERE id BETWEEN ? AND ? FOR UPDATE) l",
		locked[0], locked[len(locked)-1]).Scan(&n); err != nil || n != len(locked) {
		t.Fatalf("locking the rows: %d, %v", n, err)
	}
	pub.until(t, "the rows not locked published", func() bool { return pub.missing(free) == 0 })
	if err := tx.Commit(); err != nil {
		t.Fatal(err)
	}
	pub.all(t, locked)
	all := append(append(append(ids, blocked...), locked...), free...)
	t.Logf("all %d rows published, %d duplicates", len(all), pub.duplicates(all))
}

// The server goes read-only (SET GLOBAL read_only, which stops every user without
// an administrator's privilege) under three relays: every relay reports the
// refusal (1290; calls under way as it switches may run out of time first), nothing
// is lost, and once it is writable again every row is published.
func TestReadOnlyServerLosesNothing(t *testing.T) {
	const relays = 3
	m := harness.NewMariaDB(t)
	root, err := sql.Open("mysql", m.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer root.Close()
	db, store := open(t, m.AppDSN())
	if err := bgmysql.Migrate(context.Background(), db); err != nil {
		t.Fatal(err)
	}
	pub := newRowWatch()
	errs := newRelayErrors(t)
	ids := enqueue(t, db, store, 1000)
	runRelays(t, relays, store, pub, errs, outbox.WithPollInterval(100*time.Millisecond), outbox.WithLease(3*time.Second),
		outbox.WithBatchSize(50))
	pub.atLeast(t, 200)
	mark := errs.mark(relays)
	if _, err := root.Exec("SET GLOBAL read_only = ON"); err != nil {
		t.Fatal(err)
	}
	errs.eachSince(t, mark, func(err error) bool { return mysqlError(err, 1290) })
	if _, err := root.Exec("SET GLOBAL read_only = OFF"); err != nil {
		t.Fatal(err)
	}
	ids = append(ids, enqueue(t, db, store, 100)...)
	pub.all(t, ids)
	t.Logf("all %d rows published; %d duplicates", len(ids), pub.duplicates(ids))
}
