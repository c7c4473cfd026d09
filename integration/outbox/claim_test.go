package outbox_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
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

// TestClaimsOfAnotherTableDoNotWait: two outboxes of the same name in two schemas of
// one database, each found through its own search_path, take turns only with their
// own claims. A claim of one, stuck behind a lock on its table while it holds its
// claims' lock, does not hold up the other's claims (with one lock for both, the
// other's claim waited until its lock_timeout).
func TestClaimsOfAnotherTableDoNotWait(t *testing.T) {
	ctx := context.Background()
	dsnA := harness.PostgresSchema(t)
	u, err := url.Parse(dsnA)
	if err != nil || u.Query().Get("search_path") == "" {
		t.Fatalf("the harness's DSN %q has no search_path to change: %v", dsnA, err)
	}
	schemaA := u.Query().Get("search_path")
	schemaB := schemaA + "_b"
	setup := newPool(t, dsnA, nil) // also holds the lock on A's table
	if _, err := setup.Exec(ctx, "CREATE SCHEMA "+pgx.Identifier{schemaB}.Sanitize()); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := setup.Exec(context.Background(), "DROP SCHEMA "+pgx.Identifier{schemaB}.Sanitize()+" CASCADE"); err != nil {
			t.Error(err)
		}
	})
	withPath := func(schema string) string {
		q := u.Query()
		q.Set("search_path", schema)
		q.Set("pool_max_conns", "1") // the claim after the first runs on the same connection
		v := *u
		v.RawQuery = q.Encode()
		return v.String()
	}
	poolA, poolB := newPool(t, withPath(schemaA), nil), newPool(t, withPath(schemaB), nil)
	for _, p := range []*pgxpool.Pool{poolA, poolB} {
		if err := postgres.Migrate(ctx, p); err != nil {
			t.Fatal(err)
		}
	}
	storeA := postgres.New(poolA)
	storeB := postgres.New(poolB, postgres.WithTimeout(2*time.Second))
	enqueueRows(t, poolB, storeB, 1)
	claim := func(s *postgres.Store, token string) ([]outbox.Record, error) {
		return s.Claim(ctx, outbox.ClaimRequest{Token: token, Now: time.Now(), Limit: 10, Lease: time.Minute, ProbeLimit: 1})
	}
	// A first claim prepares A's statements, so that the next one takes the claims'
	// lock before it needs its table.
	if _, err := claim(storeA, "a1"); err != nil {
		t.Fatal(err)
	}
	tx, err := setup.Begin(ctx)
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = tx.Rollback(ctx) }()
	if _, err := tx.Exec(ctx, "LOCK TABLE "+pgx.Identifier{schemaA, postgres.Table}.Sanitize()+" IN ACCESS EXCLUSIVE MODE"); err != nil {
		t.Fatal(err)
	}
	stuck := make(chan error, 1)
	go func() { _, err := claim(storeA, "a2"); stuck <- err }()
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		var waiting int
		err := setup.QueryRow(ctx, `SELECT count(*) FROM pg_locks l JOIN pg_class c ON c.oid = l.relation
			WHERE NOT l.granted AND c.relname = $1 AND c.relnamespace = $2::regnamespace`, postgres.Table, schemaA).Scan(&waiting)
		if err != nil {
			t.Fatal(err)
		}
		if waiting > 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("A's claim never waited for its table")
		}
	}
	recs, err := claim(storeB, "b1")
	if err != nil || len(recs) != 1 {
		t.Fatalf("B's claim while A's waits: %d rows, %v; want its 1 row", len(recs), err)
	}
	if err := tx.Rollback(ctx); err != nil {
		t.Fatal(err)
	}
	if err := <-stuck; err != nil {
		t.Errorf("A's claim after the lock: %v", err)
	}
}

// captured is one statement a store ran, with its arguments and, when it ran in a
// batch after a statement that set the planner up, that statement.
type captured struct {
	sql   string
	args  []any
	setup string
}

// capture keeps the statements run on a pool while on is set.
type capture struct {
	mu    sync.Mutex
	on    bool
	stmts []captured
}

func (c *capture) TraceQueryStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceQueryStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.on {
		c.stmts = append(c.stmts, captured{sql: d.SQL, args: d.Args})
	}
	return ctx
}

func (c *capture) TraceQueryEnd(context.Context, *pgx.Conn, pgx.TraceQueryEndData) {}

// TraceBatchStart keeps a batch's statements, each with the statement before it that
// set the planner up.
func (c *capture) TraceBatchStart(ctx context.Context, _ *pgx.Conn, d pgx.TraceBatchStartData) context.Context {
	c.mu.Lock()
	defer c.mu.Unlock()
	var setup string
	for _, q := range d.Batch.QueuedQueries {
		switch {
		case strings.HasPrefix(q.SQL, "SELECT pg_advisory_xact_lock("): // the claims' lock, not a statement to explain
		case strings.HasPrefix(q.SQL, "WITH gone AS ("): // the claim's freeing of gone relays' rows
		case strings.HasPrefix(q.SQL, "SELECT set_config("):
			setup = q.SQL
		case c.on:
			c.stmts = append(c.stmts, captured{sql: q.SQL, args: q.Arguments, setup: setup})
		}
	}
	return ctx
}

func (c *capture) TraceBatchQuery(context.Context, *pgx.Conn, pgx.TraceBatchQueryData) {}

func (c *capture) TraceBatchEnd(context.Context, *pgx.Conn, pgx.TraceBatchEndData) {}

// record runs f and returns the one statement it ran.
func (c *capture) record(t *testing.T, what string, f func() error) captured {
	t.Helper()
	c.mu.Lock()
	c.on, c.stmts = true, nil
	c.mu.Unlock()
	err := f()
	c.mu.Lock()
	defer c.mu.Unlock()
	c.on = false
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
	if len(c.stmts) != 1 {
		t.Fatalf("%s ran %d statements, want 1", what, len(c.stmts))
	}
	return c.stmts[0]
}

// planNode is the part of EXPLAIN (FORMAT JSON) the test reads.
type planNode struct {
	NodeType  string     `json:"Node Type"`
	Relation  string     `json:"Relation Name"`
	IndexName string     `json:"Index Name"`
	IndexCond string     `json:"Index Cond"`
	TotalCost float64    `json:"Total Cost"`
	Plans     []planNode `json:"Plans"`
}

// scans lists "node type on relation [using index]" for every node of the plan that
// finds rows of the outbox table: a sequential scan, a TID scan, or an index scan of
// one of its indexes.
func (n planNode) scans(table string) []string {
	var out []string
	ownIndex := strings.HasPrefix(n.IndexName, table+"_") && !strings.HasPrefix(n.IndexName, postgres.HoldTable+"_")
	if (n.NodeType == "Seq Scan" || n.NodeType == "Tid Scan") && n.Relation == table || ownIndex {
		s := n.NodeType + " on " + table
		if n.IndexName != "" {
			s += " using " + n.IndexName + " [" + n.IndexCond + "]"
		}
		out = append(out, s)
	}
	for _, c := range n.Plans {
		out = append(out, c.scans(table)...)
	}
	return out
}

// explain plans s as a prepared statement, with a custom plan (the arguments' values
// known) or the generic plan PostgreSQL switches to after a few executions.
func explain(t *testing.T, conn *pgxpool.Conn, s captured, generic bool) (scans []string, cost float64, text string) {
	t.Helper()
	ctx := context.Background()
	mode := "force_custom_plan"
	if generic {
		mode = "force_generic_plan"
	}
	if _, err := conn.Exec(ctx, "SET plan_cache_mode = "+mode); err != nil {
		t.Fatal(err)
	}
	if _, err := conn.Exec(ctx, "DEALLOCATE ALL"); err != nil {
		t.Fatal(err)
	}
	if s.setup != "" { // as the store plans it: in a transaction set up by s.setup
		if _, err := conn.Exec(ctx, "BEGIN"); err != nil {
			t.Fatal(err)
		}
		defer func() {
			if _, err := conn.Exec(ctx, "ROLLBACK"); err != nil {
				t.Fatal(err)
			}
		}()
		if _, err := conn.Exec(ctx, s.setup); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := conn.Exec(ctx, "PREPARE q AS "+s.sql); err != nil {
		t.Fatalf("PREPARE %s: %v", s.sql, err)
	}
	execute := "EXECUTE q"
	if len(s.args) > 0 {
		params := make([]string, len(s.args))
		for i := range params {
			params[i] = fmt.Sprintf("$%d", i+1)
		}
		execute += "(" + strings.Join(params, ", ") + ")"
	}
	var out []byte
	// EXECUTE takes no bound parameters: pgx writes the arguments into the text.
	args := append([]any{pgx.QueryExecModeSimpleProtocol}, s.args...)
	err := conn.QueryRow(ctx, "EXPLAIN (FORMAT JSON) "+execute, args...).Scan(&out)
	if err != nil {
		t.Fatalf("EXPLAIN %s: %v", s.sql, err)
	}
	var plans []struct{ Plan planNode }
	if err := json.Unmarshal(out, &plans); err != nil || len(plans) != 1 {
		t.Fatalf("EXPLAIN output %s: %v", out, err)
	}
	rows, err := conn.Query(ctx, "EXPLAIN "+execute, args...)
	if err != nil {
		t.Fatal(err)
	}
	lines, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		t.Fatal(err)
	}
	return plans[0].Plan.scans(postgres.Table), plans[0].Plan.TotalCost, strings.Join(lines, "\n")
}

// TestPlansDoNotDependOnStatistics plans every statement a dispatcher runs, on a table
// that was never analysed and on an analysed one, with 1 % and with 50 % of its rows
// pending, as custom and as generic plans: the write-backs reach rows through the
// primary key only, and the claim, the backlog and retention read indexes that fit
// them, never the whole table.
func TestPlansDoNotDependOnStatistics(t *testing.T) {
	const rows = 20_000
	for _, c := range []struct {
		pendingEvery int
		keys         string
		key          func(i int) []byte
	}{
		{100, "64 keys", func(i int) []byte { return []byte(fmt.Sprint(i % 64)) }},
		{2, "64 keys", func(i int) []byte { return []byte(fmt.Sprint(i % 64)) }},
		{100, "a key per row", func(i int) []byte { return []byte(fmt.Sprint("k", i)) }},
		{2, "a key per row", func(i int) []byte { return []byte(fmt.Sprint("k", i)) }},
		{1, "a key per row", func(i int) []byte { return []byte(fmt.Sprint("k", i)) }},
	} {
		pendingEvery := c.pendingEvery
		t.Run(fmt.Sprintf("%d%% pending, %s", 100/pendingEvery, c.keys), func(t *testing.T) {
			dsn := harness.PostgresSchema(t)
			cap := &capture{}
			pool := newPool(t, dsn, cap)
			ctx := context.Background()
			if err := postgres.Migrate(ctx, pool); err != nil {
				t.Fatal(err)
			}
			// Autovacuum must not analyse the table behind the test's back.
			if _, err := pool.Exec(ctx, "ALTER TABLE "+postgres.Table+" SET (autovacuum_enabled = false)"); err != nil {
				t.Fatal(err)
			}
			clock := fakeclock.New(start())
			store := postgres.New(pool, postgres.WithClock(clock))
			fillSettled(t, pool, store, rows, pendingEvery, c.key, clock.Now())

			// One of each statement, with the arguments a dispatcher gives them.
			now := clock.Now()
			var recs []outbox.Record
			stmts := map[string]captured{
				"claim": cap.record(t, "claim", func() (err error) {
					recs, err = store.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: now, Limit: 100, Lease: time.Minute, ProbeLimit: 1})
					return err
				}),
			}
			if len(recs) != 100 {
				t.Fatalf("claimed %d rows, want 100", len(recs))
			}
			ids := make([]int64, len(recs))
			for i, r := range recs {
				ids[i] = r.ID
			}
			stmts["mark published"] = cap.record(t, "mark", func() error {
				_, err := store.MarkPublished(ctx, "t", now, ids[:40])
				return err
			})
			stmts["defer"] = cap.record(t, "defer", func() error {
				_, err := store.Defer(ctx, outbox.Deferral{Token: "t", IDs: ids[40:70], Now: now})
				return err
			})
			stmts["fail"] = cap.record(t, "fail", func() error {
				fs := make([]outbox.Failure, 30)
				for i := range fs {
					fs[i] = outbox.Failure{ID: ids[70+i], RetryAt: now.Add(time.Second), Err: "boom"}
				}
				_, _, err := store.Fail(ctx, "t", fs)
				return err
			})
			stmts["hold"] = cap.record(t, "hold", func() error {
				_, err := store.Hold(ctx, outbox.Hold{Destination: benchDests[1], Token: "t", Now: now, Until: now.Add(time.Minute), MaxDeferral: time.Hour})
				return err
			})
			stmts["backlog"] = cap.record(t, "backlog", func() error { _, _, err := store.Backlog(ctx); return err })
			stmts["backlog by destination"] = cap.record(t, "backlog by destination", func() error {
				_, err := store.BacklogByDestination(ctx)
				return err
			})
			stmts["retention"] = cap.record(t, "retention", func() error {
				_, err := store.DeleteSettled(ctx, now.Add(-time.Hour), now.Add(-time.Hour), 1000)
				return err
			})

			conn, err := pool.Acquire(ctx)
			if err != nil {
				t.Fatal(err)
			}
			defer conn.Release()
			for _, analysed := range []bool{false, true} {
				if analysed {
					if _, err := conn.Exec(ctx, "ANALYZE "+postgres.Table); err != nil {
						t.Fatal(err)
					}
				}
				for _, generic := range []bool{false, true} {
					for name, s := range stmts {
						scans, cost, text := explain(t, conn, s, generic)
						where := fmt.Sprintf("%s (analysed %v, generic plan %v)", name, analysed, generic)
						ok := checkScans(t, where, name, scans)
						// The claim and the backlog run with JIT off; the others must
						// stay below the default jit_above_cost, or compiling them
						// costs more than running them.
						if name != "claim" && !strings.HasPrefix(name, "backlog") && cost >= jitAboveCost {
							t.Errorf("%s: estimated cost %.0f would have it compiled by JIT", where, cost)
							ok = false
						}
						if !ok {
							t.Logf("%s:\n%s", where, text)
						}
					}
				}
			}
		})
	}
}

// jitAboveCost is PostgreSQL's default jit_above_cost.
const jitAboveCost = 100_000

// checkScans holds a statement's scans of the outbox table to what fits it.
func checkScans(t *testing.T, where, name string, scans []string) (ok bool) {
	t.Helper()
	ok = true
	errorf := func(format string, args ...any) {
		t.Errorf(format, args...)
		ok = false
	}
	pkey := postgres.Table + "_pkey"
	if len(scans) == 0 {
		errorf("%s: the plan does not read %s", where, postgres.Table)
	}
	// The claim locks and leases the rows it took where they are (by TID): one scan for
	// the lock, one for the UPDATE.
	if name == "claim" {
		tid := 0
		for _, s := range scans {
			if strings.HasPrefix(s, "Tid Scan") {
				tid++
			}
		}
		if tid < 2 {
			errorf("%s: %d TID scans of %s, want the lock's and the UPDATE's", where, tid, postgres.Table)
		}
	}
	for _, s := range scans {
		// The pending index leads with the destination: searched by another column
		// (ids, say), it is walked whole. (Without a condition it is read in order
		// under a limit: the skip scan's first step.)
		if strings.Contains(s, " using "+postgres.Table+"_pending [(") && !strings.Contains(s, "[(destination") && !strings.Contains(s, "[((destination") {
			errorf("%s: %s walks the pending index without its destination", where, s)
		}
		switch name {
		case "mark published", "defer", "fail":
			if !strings.Contains(s, " using "+pkey+" [") {
				errorf("%s: %s; write-backs must find their rows by the primary key", where, s)
			}
		default:
			if strings.HasPrefix(s, "Seq Scan") {
				errorf("%s: %s reads the whole table", where, s)
			}
		}
	}
	return ok
}

// fillSettled enqueues n rows over four destinations, row i with key(i), and settles
// all but every pendingEvery-th one: published, with one in ten of the settled rows
// dead.
func fillSettled(t *testing.T, pool *pgxpool.Pool, store *postgres.Store, n, pendingEvery int, key func(int) []byte, now time.Time) {
	t.Helper()
	ctx := context.Background()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: benchDests[i%len(benchDests)], Message: transport.Message{
			Key: key(i), Value: make([]byte, 200),
		}}
	}
	if _, err := store.Enqueue(ctx, postgres.Pgx(pool), entries...); err != nil {
		t.Fatal(err)
	}
	_, err := pool.Exec(ctx, `UPDATE `+postgres.Table+` SET
		status = CASE WHEN id % 10 = 1 THEN 'dead' ELSE 'published' END, settled_at = $2
		WHERE id % $1 <> 0`, pendingEvery, now.Add(-2*time.Hour))
	if err != nil {
		t.Fatal(err)
	}
}
