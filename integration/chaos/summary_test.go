package chaos

import (
	"context"
	"fmt"
	"io"
	"sync"
	"testing"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox/postgres"
)

// outboxOnPostgres returns a migrated outbox in a schema of the test's own, its DSN
// and the pool behind the store.
func outboxOnPostgres(t *testing.T) (*postgres.Store, *pgxpool.Pool, string) {
	t.Helper()
	dsn := harness.PostgresSchema(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(pool.Close)
	if err := postgres.Migrate(context.Background(), pool); err != nil {
		t.Fatal(err)
	}
	return postgres.New(pool), pool, dsn
}

// result is one scenario's line in the summary the suite prints at the end.
type result struct {
	scenario                        string
	in, delivered, duplicates, lost int
	took                            time.Duration
}

var (
	resultsMu sync.Mutex
	results   []result
)

func record(r result) {
	resultsMu.Lock()
	defer resultsMu.Unlock()
	results = append(results, r)
}

func printSummary(w io.Writer) {
	printHung(w)
	resultsMu.Lock()
	defer resultsMu.Unlock()
	if len(results) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "\nscenario\tmessages in\tdelivered\tduplicates\tlost\ttime")
	for _, r := range results {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%v\n", r.scenario, r.in, r.delivered, r.duplicates, r.lost, r.took.Round(10*time.Millisecond))
	}
	tw.Flush()
}

// printHung prints the hung-broker lines: how many calls and how long from the first
// hung call until each circuit opened, and the longest any publish took.
func printHung(w io.Writer) {
	hungMu.Lock()
	defer hungMu.Unlock()
	if len(hungResults) == 0 {
		return
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nhung broker (caller deadline %v)\tthreshold\tcalls to open\ttime to open\tlongest publish\n", callerDeadline)
	for _, r := range hungResults {
		fmt.Fprintf(tw, "%s\t%d\t%d\t%v\t%v\n", r.adapter, hungThreshold, r.callsToOpen, r.timeToOpen.Round(time.Millisecond), r.longestPublish.Round(time.Millisecond))
	}
	tw.Flush()
}
