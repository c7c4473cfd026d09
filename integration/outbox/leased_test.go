package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// analysedNode is the part of EXPLAIN (ANALYZE, FORMAT JSON) these tests read.
type analysedNode struct {
	NodeType  string         `json:"Node Type"`
	IndexName string         `json:"Index Name"`
	Removed   float64        `json:"Rows Removed by Filter"`
	Plans     []analysedNode `json:"Plans"`
}

// removedBy sums, over the plan's scans of index, the rows read from the table that
// the scan's filter then dropped.
func (n analysedNode) removedBy(index string) (removed float64, scans int) {
	if n.IndexName == index {
		removed, scans = n.Removed, 1
	}
	for _, c := range n.Plans {
		r, s := c.removedBy(index)
		removed, scans = removed+r, scans+s
	}
	return removed, scans
}

// explainAnalysed runs s, as the store runs it (in a transaction set up by s.setup),
// under EXPLAIN ANALYZE, and rolls it back.
func explainAnalysed(t *testing.T, conn *pgxpool.Conn, s captured) analysedNode {
	t.Helper()
	ctx := context.Background()
	for _, q := range []string{"DEALLOCATE ALL", "BEGIN"} {
		if _, err := conn.Exec(ctx, q); err != nil {
			t.Fatal(err)
		}
	}
	defer func() {
		if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
			t.Fatal(err)
		}
	}()
	if s.setup != "" {
		if _, err := conn.Exec(ctx, s.setup); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "PREPARE q AS "+s.sql); err != nil {
		t.Fatalf("PREPARE %s: %v", s.sql, err)
	}
	params := make([]string, len(s.args))
	for i := range params {
		params[i] = "$" + strconv.Itoa(i+1)
	}
	var out []byte
	// EXECUTE takes no bound parameters: pgx writes the arguments into the text.
	args := append([]any{pgx.QueryExecModeSimpleProtocol}, s.args...)
	err := conn.QueryRow(ctx, "EXPLAIN (ANALYZE, FORMAT JSON) EXECUTE q("+strings.Join(params, ", ")+")", args...).Scan(&out)
	if err != nil {
		t.Fatalf("EXPLAIN ANALYZE %s: %v", s.sql, err)
	}
	var plans []struct{ Plan analysedNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	return plans[0].Plan
}

// unvacuumedTable migrates the outbox in a schema of the test's own, with autovacuum
// off so that nothing analyses the table behind the test's back, and returns a pool
// on it whose statements go to the capture.
func unvacuumedTable(t *testing.T) (*pgxpool.Pool, *capture) {
	t.Helper()
	cap := &capture{}
	pool := newPool(t, harness.PostgresSchema(t), cap)
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(context.Background(), "ALTER TABLE "+postgres.Table+" SET (autovacuum_enabled = false)"); err != nil {
		t.Fatal(err)
	}
	return pool, cap
}

// TestClaimPassesOverLeasedRows has two claims lease 1,000 of 3,000 keyed rows, the
// state a third relay's claim meets, and runs the third claim under EXPLAIN ANALYZE:
// the rows the others lease are the lowest ids of the destination, and the claim must
// pass over them in the pending index (whose third column is the lease's end) rather
// than read each from the table and drop it; it still takes the next 500 rows. On a
// table never analysed and on an analysed one.
func TestClaimPassesOverLeasedRows(t *testing.T) {
	const rows, batch = 3_000, 500
	for _, analysed := range []bool{false, true} {
		t.Run(fmt.Sprintf("analysed %v", analysed), func(t *testing.T) {
			pool, cap := unvacuumedTable(t)
			ctx := context.Background()
			clock := fakeclock.New(start())
			store := postgres.New(pool, postgres.WithClock(clock))
			entries := make([]outbox.Entry, rows)
			for i := range entries {
				entries[i] = outbox.Entry{Destination: benchDests[0], Message: transport.Message{Key: []byte("k" + strconv.Itoa(i)), Value: []byte("v")}}
			}
			ids, err := store.Enqueue(ctx, postgres.Pgx(pool), entries...)
			if err != nil {
				t.Fatal(err)
			}
			if analysed {
				if _, err := pool.Exec(ctx, "ANALYZE "+postgres.Table); err != nil {
					t.Fatal(err)
				}
			}
			now := clock.Now()
			req := func(token string) outbox.ClaimRequest {
				return outbox.ClaimRequest{Token: token, Now: now, Limit: batch, Lease: time.Minute, ProbeLimit: 1}
			}
			for _, token := range []string{"a", "b"} {
				if recs, err := store.Claim(ctx, req(token)); err != nil || len(recs) != batch {
					t.Fatalf("claim %s: %d rows, %v", token, len(recs), err)
				}
			}
			var third []outbox.Record
			claim := cap.record(t, "claim", func() (err error) {
				third, err = store.Claim(ctx, req("c"))
				return err
			})
			if len(third) != batch || third[0].ID != ids[2*batch] || third[batch-1].ID != ids[3*batch-1] {
				t.Fatalf("the third claim took %d rows from id %d, want ids %d to %d", len(third), third[0].ID, ids[2*batch], ids[3*batch-1])
			}
			if err := store.Release(ctx, "c"); err != nil { // the same state, explained
				t.Fatal(err)
			}
			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			plan := explainAnalysed(t, conn, claim)
			removed, scans := plan.removedBy(postgres.Table + "_pending")
			if scans == 0 {
				t.Fatalf("the claim does not read %s_pending", postgres.Table)
			}
			if removed > 0 {
				t.Errorf("the claim read %.0f rows through the pending index only to drop them (the other claims' leased rows: want 0)", removed)
			}
		})
	}
}

// TestMigrateReplacesTheTwoColumnPendingIndex migrates a table whose pending index is
// the one of schema versions 1 to 3, on (destination, id): Migrate replaces it with the
// index whose third column is the lease's end, for the default table and for a table
// of another name and schema, and claims then pass over leased rows in it.
func TestMigrateReplacesTheTwoColumnPendingIndex(t *testing.T) {
	dsn := harness.PostgresSchema(t)
	pool := newPool(t, dsn, nil)
	ctx := context.Background()
	named, err := postgres.NewTableName("billing_"+strconv.FormatInt(time.Now().UnixNano(), 36), "outbox")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := pool.Exec(context.Background(), "DROP SCHEMA IF EXISTS "+strings.Split(named.String(), ".")[0]+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	for _, c := range []struct {
		opts  []postgres.Option
		table string // as the SQL names it
		index string // the pending index, qualified
	}{
		{nil, postgres.Table, postgres.Table + "_pending"},
		{[]postgres.Option{postgres.WithTable(named)}, named.String(), strings.Split(named.String(), ".")[0] + `."outbox_pending"`},
	} {
		if err := postgres.Migrate(ctx, pool, c.opts...); err != nil {
			t.Fatal(err)
		}
		// The index as versions 1 to 3 created it, on a table they left unmarked.
		for _, q := range []string{
			"COMMENT ON TABLE " + c.table + " IS NULL",
			"DROP INDEX " + c.index,
			"CREATE INDEX " + strings.TrimPrefix(c.index, strings.Split(c.index, ".")[0]+".") + " ON " + c.table + " (destination, id) WHERE status = 'pending'",
		} {
			if _, err := pool.Exec(ctx, q); err != nil {
				t.Fatalf("%s: %v", q, err)
			}
		}
		columns := func() (n int) {
			t.Helper()
			if err := pool.QueryRow(ctx, "SELECT indnatts FROM pg_index WHERE indexrelid = $1::regclass", c.index).Scan(&n); err != nil {
				t.Fatal(err)
			}
			return n
		}
		if n := columns(); n != 2 {
			t.Fatalf("%s: the old index has %d columns", c.index, n)
		}
		for range 2 { // once to replace it, once more to see that it stays
			if err := postgres.Migrate(ctx, pool, c.opts...); err != nil {
				t.Fatal(err)
			}
			if n := columns(); n != 3 {
				t.Errorf("%s after Migrate: %d columns, want 3", c.index, n)
			}
		}
	}
}
