package outbox_test

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// soakEnv turns the soak on: it runs for minutes, so only `make soak` runs it.
const soakEnv = "BROKERGUARD_SOAK"

const (
	soakKeys, soakPerKey = 600, 100 // 60,000 rows
	soakKillEvery        = 2 * time.Second
	soakTime             = 10 * time.Minute
)

// TestSoak runs three relay processes (Run with a session, batches of 500) over
// 60,000 keyed rows on a PostgreSQL cluster of the test's own, kills one of them with
// SIGKILL every two seconds (a new one takes its place), and restarts the server
// in immediate mode (SIGQUIT to the postmaster: no checkpoint, crash recovery) when a
// third and when two thirds of the rows are delivered. Every row must be delivered,
// each key's rows first delivered in enqueue order; it prints the kills, the
// restarts and the duplicate rate.
func TestSoak(t *testing.T) {
	if os.Getenv(soakEnv) == "" {
		t.Skip("a soak of minutes: make soak runs it (" + soakEnv + "=1)")
	}
	cluster := harness.NewPostgresCluster(t)
	dsn, db, ids := relayTables(t, cluster, soakKeys, soakPerKey)
	ctx, cancel := context.WithTimeout(context.Background(), soakTime)
	defer cancel()
	if _, err := db.Exec(ctx, `ALTER TABLE `+deliveredTable+` ADD COLUMN seq bigserial`); err != nil {
		t.Fatal(err)
	}
	relays := []*exec.Cmd{startRelay(t, dsn, false), startRelay(t, dsn, false), startRelay(t, dsn, false)}
	kills, restarts := 0, 0
	tick := time.NewTicker(soakKillEvery)
	defer tick.Stop()
	for {
		n := soakDelivered(ctx, db)
		if n == len(ids) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d rows delivered after %v (%d kills, %d restarts)", n, len(ids), soakTime, kills, restarts)
		}
		if restarts < 2 && n >= len(ids)*(restarts+1)/3 {
			if err := restartImmediate(ctx, db, cluster); err != nil {
				t.Fatal(err)
			}
			restarts++
			t.Logf("restart %d (immediate) at %d rows delivered", restarts, n)
		}
		select {
		case <-tick.C:
			victim := kills % len(relays)
			_ = relays[victim].Process.Signal(syscall.SIGKILL)
			_ = relays[victim].Wait()
			relays[victim] = startRelay(t, dsn, false)
			kills++
		case <-ctx.Done():
		case <-time.After(100 * time.Millisecond): // a look at the count, not a timing
		}
	}
	rows, dups := deliveries(t, db)
	var outOfOrder int
	err := db.QueryRow(ctx, `SELECT count(*) FROM (
		SELECT id, lag(id) OVER (PARTITION BY k ORDER BY first) AS before FROM (
			SELECT d.id, o.msg_key AS k, min(d.seq) AS first FROM `+deliveredTable+` d
			JOIN `+postgres.Table+` o ON o.id = d.id GROUP BY d.id, o.msg_key
		) f
	) o WHERE before > id`).Scan(&outOfOrder)
	if err != nil {
		t.Fatal(err)
	}
	fmt.Printf("soak: %d rows, %d kills, %d immediate restarts: %d delivered, 0 lost, %d first deliveries out of key order, %d duplicates (%.2f %%)\n",
		len(ids), kills, restarts, rows, outOfOrder, dups, 100*float64(dups)/float64(rows))
	if rows != len(ids) {
		t.Errorf("%d of %d rows delivered", rows, len(ids))
	}
	if outOfOrder > 0 {
		t.Errorf("%d rows were first delivered before an earlier row of their key", outOfOrder)
	}
}

// soakDelivered counts the rows delivered at least once; while the server restarts
// it answers 0 rather than failing.
func soakDelivered(ctx context.Context, db *pgxpool.Pool) int {
	var n int
	_ = db.QueryRow(ctx, `SELECT count(DISTINCT id) FROM `+deliveredTable).Scan(&n)
	return n
}

// restartImmediate stops the cluster's postmaster with SIGQUIT (pg_ctl's immediate
// mode: no checkpoint, every session cut, crash recovery at the next start), found
// as the parent of a server process of db, waits for it to go, and starts the
// cluster again.
func restartImmediate(ctx context.Context, db *pgxpool.Pool, c *harness.PostgresCluster) error {
	var backend int
	if err := db.QueryRow(ctx, `SELECT pg_backend_pid()`).Scan(&backend); err != nil {
		return err
	}
	raw, err := os.ReadFile("/proc/" + strconv.Itoa(backend) + "/stat")
	if err != nil {
		return err
	}
	f := strings.Fields(string(raw[strings.LastIndexByte(string(raw), ')')+1:]))
	postmaster, err := strconv.Atoi(f[1])
	if err != nil {
		return err
	}
	if err := syscall.Kill(postmaster, syscall.SIGQUIT); err != nil {
		return err
	}
	for syscall.Kill(postmaster, 0) == nil {
		if ctx.Err() != nil {
			return ctx.Err()
		}
		time.Sleep(20 * time.Millisecond) // waiting for the server to exit
	}
	return c.Start()
}
