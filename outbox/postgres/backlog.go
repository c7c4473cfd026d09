package postgres

import (
	"context"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// BacklogExactUpTo is how many pending rows of one destination BacklogByDestination
// counts one by one. Past it the count is an estimate (DestinationBacklog.Estimated),
// read from a sample of the table's pages, so that a reading costs the database
// about the same at a million pending rows as at ten thousand.
const BacklogExactUpTo = 10_000

// backlogSamplePages is how many of the table's pages an estimate reads, at most:
// with 50 to 100 rows a page, a sample of 1,000 pages sees tens of thousands of rows.
const backlogSamplePages = 1000

// WithExactBacklog makes BacklogByDestination count every pending row, however many
// there are: what "brokerguard outbox stats --exact" asks for. Each reading then
// costs the database a pass over the pending rows' index entries.
func WithExactBacklog() Option { return func(s *Store) { s.exactBacklog = true } }

// backlogByDestSQL lists the destinations with pending rows (a skip scan of the
// pending index) and, for each, its pending rows counted up to CAP_ (no cap: CAP_ is
// ALL) and the age of its first pending row in enqueue order, one index probe.
var backlogByDestSQL = `
WITH RECURSIVE ` + pendingDests + `
SELECT dests.d, c.n, f.created_at FROM dests
CROSS JOIN LATERAL (
	SELECT count(*) AS n FROM (
		SELECT 1 FROM ` + Table + ` o WHERE ` + sameDestination("dests.d") + ` AND o.status = 'pending' LIMIT CAP_
	) p
) c
CROSS JOIN LATERAL (
	SELECT o.created_at FROM ` + Table + ` o WHERE ` + sameDestination("dests.d") + ` AND o.status = 'pending'
	ORDER BY o.destination, o.id LIMIT 1
) f
WHERE dests.d IS NOT NULL`

// backlogSampleSQL counts the pending rows of the destinations $2 in $1 percent of
// the table's pages, the same pages at every reading of an unchanged table.
const backlogSampleSQL = `
SELECT o.destination, count(*) FROM ` + Table + ` o TABLESAMPLE SYSTEM ($1) REPEATABLE (0)
WHERE o.status = 'pending' AND o.destination = ANY ($2::text[]) GROUP BY o.destination`

// BacklogByDestination returns the pending rows per destination; the ages are those
// of each destination's first pending row in enqueue order, measured on the Store's
// clock. A destination with more than BacklogExactUpTo pending rows has its count
// estimated from a sample of the table and marked Estimated, unless the Store was
// made WithExactBacklog. Rows whose destination does not parse are left out (the
// dispatcher makes them dead). Its signature fits telemetry.WithOutboxBacklog, which
// reuses a reading for an interval so that scrapes do not each run the query.
func (s *Store) BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error) {
	limit := "ALL"
	if !s.exactBacklog {
		limit = strconv.Itoa(BacklogExactUpTo + 1)
	}
	var out []outbox.DestinationBacklog
	var over []string // destinations whose count reached the cap, as stored
	var at []int      // their places in out
	err := s.planned(ctx, []string{backlogSetup}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		now := s.now()
		for rows.Next() {
			var (
				dest    string
				pending int64
				first   time.Time
			)
			if err := rows.Scan(&dest, &pending, &first); err != nil {
				return err
			}
			d, err := transport.ParseDestination(dest)
			if err != nil {
				continue
			}
			b := outbox.DestinationBacklog{Destination: d, Pending: pending, Oldest: max(now.Sub(first), 0)}
			if !s.exactBacklog && pending > BacklogExactUpTo {
				b.Estimated = true
				over, at = append(over, dest), append(at, len(out))
			}
			out = append(out, b)
		}
		return rows.Err()
	}, s.sql(strings.Replace(backlogByDestSQL, "CAP_", limit, 1)))
	if err == nil && len(over) > 0 {
		err = s.estimate(ctx, out, over, at)
	}
	if err != nil {
		return nil, fmt.Errorf("postgres: backlog by destination: %w", err)
	}
	return out, nil
}

// estimate replaces the counts of the destinations over, at places at in out (each
// counted up to BacklogExactUpTo + 1), by an estimate from a sample of at most
// backlogSamplePages pages of the table, never below what was counted.
func (s *Store) estimate(ctx context.Context, out []outbox.DestinationBacklog, over []string, at []int) error {
	var pages int64
	err := s.db.QueryRow(ctx, `SELECT pg_relation_size(to_regclass($1)) / current_setting('block_size')::bigint`,
		s.table.String()).Scan(&pages)
	if err != nil {
		return err
	}
	pct := 100.0
	if pages > backlogSamplePages {
		pct = 100 * float64(backlogSamplePages) / float64(pages)
	}
	sampled := map[string]int64{}
	err = s.planned(ctx, []string{planSetup}, func(br pgx.BatchResults) error {
		rows, err := br.Query()
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var (
				dest string
				n    int64
			)
			if err := rows.Scan(&dest, &n); err != nil {
				return err
			}
			sampled[dest] = n
		}
		return rows.Err()
	}, s.sql(backlogSampleSQL), pct, over)
	if err != nil {
		return err
	}
	for j, i := range at {
		out[i].Pending = max(out[i].Pending, int64(math.Round(float64(sampled[over[j]])*100/pct)))
	}
	return nil
}
