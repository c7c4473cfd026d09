package outbox_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// With relayEnv set, TestMain runs the test binary as a relay process (runRelay)
// instead of the tests: Run with a session, publishing into the delivered table.
const (
	relayEnv       = "BROKERGUARD_OUTBOX_RELAY"
	relayHangEnv   = "BROKERGUARD_OUTBOX_RELAY_HANG" // set: record the first publish, say so, then hang
	relayLease     = time.Hour                       // so that no row can come back by its lease in these tests
	relayKillBatch = 500
)

// deliveredTable records every message the relays of these tests publish: the row id
// and the relay, one line per publish of a row (a row published twice has two).
const deliveredTable = "delivered"

// recorder is a publisher that records what it publishes in the delivered table.
type recorder struct {
	db    *pgxpool.Pool
	relay string
	hang  chan struct{} // not nil: after its first publish it says midBatch and blocks
	once  sync.Once
}

func (r *recorder) Publish(ctx context.Context, _ transport.Destination, msgs ...transport.Message) error {
	ids := make([]int64, len(msgs))
	for i, m := range msgs {
		ids[i] = rowID(m.Headers)
	}
	if _, err := r.db.Exec(ctx, `INSERT INTO `+deliveredTable+` (id, relay) SELECT unnest($1::bigint[]), $2`, ids, r.relay); err != nil {
		return err
	}
	if r.hang != nil {
		r.once.Do(func() { fmt.Println(midBatch) })
		<-r.hang // killed here: published, not yet marked published
	}
	return nil
}

// newRelay returns a Processor on dsn with the tests' lease and a recorder.
func newRelay(ctx context.Context, dsn, name string, hang bool) (*outbox.Processor, *pgxpool.Pool, error) {
	pool, err := openPool(dsn, nil)
	if err != nil {
		return nil, nil, err
	}
	rec := &recorder{db: pool, relay: name}
	if hang {
		rec.hang = make(chan struct{})
	}
	proc, err := outbox.NewProcessor(postgres.New(pool), nil, rec, outbox.WithClassifier(outageOnError), outbox.WithOwner(name),
		outbox.WithBatchSize(relayKillBatch), outbox.WithLease(relayLease), outbox.WithIDHeader(idHeader))
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return proc, pool, nil
}

// runRelay is the relay process: Run until killed.
func runRelay(dsn string) error {
	proc, pool, err := newRelay(context.Background(), dsn, "doomed", os.Getenv(relayHangEnv) != "")
	if err != nil {
		return err
	}
	defer pool.Close()
	return proc.Run(context.Background())
}

// startRelay starts the test binary as a relay process on dsn and returns it once
// it is publishing (hang: once its first publish was recorded and it hangs).
func startRelay(t *testing.T, dsn string, hang bool) *exec.Cmd {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), relayEnv+"="+dsn)
	if hang {
		cmd.Env = append(cmd.Env, relayHangEnv+"=1")
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	if hang {
		said := make(chan string, 1)
		go func() {
			sc := bufio.NewScanner(stdout)
			sc.Scan()
			said <- sc.Text()
		}()
		select {
		case line := <-said:
			if line != midBatch {
				t.Fatalf("relay said %q (stderr: %s), want %q", line, stderr.String(), midBatch)
			}
		case <-time.After(time.Minute):
			t.Fatalf("the relay did not publish in a minute (stderr: %s)", stderr.String())
		}
	}
	return cmd
}

// relayCluster starts a PostgreSQL cluster of the test's own with the outbox and the
// delivered table, and enqueues keys*perKey rows, keyed round robin (so every claim
// of the lowest ids spans every key).
func relayCluster(t *testing.T, keys, perKey int) (dsn string, db *pgxpool.Pool, ids []int64) {
	t.Helper()
	return relayTables(t, harness.NewPostgresCluster(t), keys, perKey)
}

// relayTables is relayCluster on cluster.
func relayTables(t *testing.T, cluster *harness.PostgresCluster, keys, perKey int) (dsn string, db *pgxpool.Pool, ids []int64) {
	t.Helper()
	dsn = cluster.DSN()
	db = newPool(t, dsn, nil)
	ctx := context.Background()
	if err := postgres.Migrate(ctx, db); err != nil {
		t.Fatal(err)
	}
	if _, err := db.Exec(ctx, `CREATE TABLE `+deliveredTable+` (id bigint NOT NULL, relay text NOT NULL)`); err != nil {
		t.Fatal(err)
	}
	store := postgres.New(db)
	for i := 0; i < perKey; i++ {
		entries := make([]outbox.Entry, keys)
		for k := range entries {
			entries[k] = outbox.Entry{Destination: orders, Message: transport.Message{Key: fmt.Appendf(nil, "key-%d", k), Value: []byte("v")}}
		}
		err := pgx.BeginFunc(ctx, db, func(tx pgx.Tx) error {
			got, err := store.Enqueue(ctx, postgres.Pgx(tx), entries...)
			ids = append(ids, got...)
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	return dsn, db, ids
}

// deliveries counts the rows delivered at least once, and the publishes beyond the
// first.
func deliveries(t *testing.T, db *pgxpool.Pool) (rows, duplicates int) {
	t.Helper()
	var total int
	if err := db.QueryRow(context.Background(), `SELECT count(DISTINCT id), count(*) FROM `+deliveredTable).Scan(&rows, &total); err != nil {
		t.Fatal(err)
	}
	return rows, total - rows
}

// TestKilledRelaysKeysGoBackWithinSeconds: a relay process holding every one of 200
// keys (its batch is the first row or rows of each) hangs in its publish: other
// relays take none of its rows while it lives, however many times they claim. Once
// it is killed (SIGKILL: no release, no deferred code), the other relays take its
// rows at their next claim, an hour before its leases end, and deliver the whole
// backlog: nothing lost, and no more duplicates than the batch it was publishing.
// The time from the kill to 90 % of the backlog delivered is logged.
func TestKilledRelaysKeysGoBackWithinSeconds(t *testing.T) {
	const keys, perKey = 200, 50
	dsn, db, ids := relayCluster(t, keys, perKey)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	relay := startRelay(t, dsn, true)

	var leased, heldKeys int
	if err := db.QueryRow(ctx, `SELECT count(*), count(DISTINCT msg_key) FROM `+postgres.Table+` WHERE lease_owner LIKE 'doomed/%'`).Scan(&leased, &heldKeys); err != nil {
		t.Fatal(err)
	}
	if heldKeys != keys {
		t.Fatalf("the relay holds %d keys (%d rows), want all %d", heldKeys, leased, keys)
	}
	// While it lives, its rows are its own: claims of other relays take nothing.
	probe, probePool, err := newRelay(ctx, dsn, "prober", false)
	if err != nil {
		t.Fatal(err)
	}
	defer probePool.Close()
	for i := range 3 {
		if rep, err := probe.ProcessPending(ctx); err != nil || rep.Claimed != 0 {
			t.Fatalf("claim %d beside the live relay: %d rows, %v; want none", i, rep.Claimed, err)
		}
	}

	if err := relay.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	_ = relay.Wait()
	for i := range 2 {
		proc, pool, err := newRelay(ctx, dsn, fmt.Sprint("survivor-", i), false)
		if err != nil {
			t.Fatal(err)
		}
		rctx, stop := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() { defer close(done); _ = proc.Run(rctx) }()
		t.Cleanup(func() { stop(); <-done; pool.Close() })
	}
	var at90 time.Duration
	for {
		n, _ := deliveries(t, db)
		if at90 == 0 && n >= len(ids)*9/10 {
			at90 = time.Since(killed)
		}
		if n == len(ids) {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("%d of %d rows delivered when the test's time ran out", n, len(ids))
		}
		time.Sleep(10 * time.Millisecond) // waiting for other processes' work, not timing it
	}
	all := time.Since(killed)
	rows, dups := deliveries(t, db)
	t.Logf("after the kill: 90%% of %d rows delivered in %v, all in %v; %d duplicates (the killed relay's batch: %d rows)",
		len(ids), at90.Round(time.Millisecond), all.Round(time.Millisecond), dups, leased)
	if rows != len(ids) {
		t.Fatalf("%d of %d rows delivered", rows, len(ids))
	}
	if dups > leased {
		t.Errorf("%d duplicates; want at most the killed relay's batch of %d", dups, leased)
	}
}
