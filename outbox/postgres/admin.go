package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// deleteSettledSQL deletes up to $3 published rows settled before $1 and up to $3
// dead rows settled before $2 (NULL: none), oldest first along the settled index. Rows
// another statement has locked are skipped: they are deleted next time.
const deleteSettledSQL = `
WITH published AS (
	SELECT id FROM ` + Table + ` WHERE status = 'published' AND settled_at < $1
	ORDER BY status, settled_at, id LIMIT $3 FOR UPDATE SKIP LOCKED
), dead AS (
	SELECT id FROM ` + Table + ` WHERE status = 'dead' AND settled_at < $2
	ORDER BY status, settled_at, id LIMIT $3 FOR UPDATE SKIP LOCKED
)
DELETE FROM ` + Table + ` WHERE id IN (SELECT id FROM published UNION ALL SELECT id FROM dead)`

// DeleteSettled implements outbox.Purger with one short statement.
func (s *Store) DeleteSettled(ctx context.Context, publishedBefore, deadBefore time.Time, limit int) (int, error) {
	if err := storekit.CheckDeleteLimit(limit); err != nil {
		return 0, err
	}
	tag, err := s.db.Exec(ctx, s.sql(deleteSettledSQL), nullTime(publishedBefore), nullTime(deadBefore), limit)
	if err != nil {
		return 0, fmt.Errorf("postgres: delete settled rows: %w", err)
	}
	return int(tag.RowsAffected()), nil
}

func nullTime(t time.Time) *time.Time {
	if t.IsZero() {
		return nil
	}
	return &t
}

// deadFilter is the WHERE clause of a DeadFilter: $1 ids (NULL: any), $2 destination
// and $3 reason (NULL: any), which matches the bare reason or the reason and a detail
// (storekit.MatchesReason).
const deadFilter = `status = 'dead' AND ($1::bigint[] IS NULL OR id = ANY($1))
	AND ($2::text IS NULL OR destination = $2) AND ($3::text IS NULL OR last_error = $3 OR starts_with(last_error, $3 || ': '))`

func filterArgs(f outbox.DeadFilter) []any {
	var ids []int64
	if len(f.IDs) > 0 {
		ids = f.IDs
	}
	var dest, reason *string
	if f.Destination != (transport.Destination{}) {
		d := f.Destination.String()
		dest = &d
	}
	if f.Reason != "" {
		reason = &f.Reason
	}
	return []any{ids, dest, reason}
}

// reasonExpr is storekit.DeadReason in SQL: the text of last_error before its first
// ': '. The dead-row indexes are on it.
const reasonExpr = `split_part(coalesce(last_error, ''), ': ', 1)`

// deadAccess is how the rows of one shape of DeadFilter are found: lead is the
// condition added to deadFilter that an index can serve (a row the filter matches
// meets it too), order the order of that index's entries once lead holds, so that a
// page is read in id order along the index and no plan sorts. A filter that matches
// nothing then reads nothing, however many dead rows there are: without them, a
// destination or a list of ids that matched no row had the page walk every dead row
// (the filter's conditions are written with "IS NULL OR", which no index serves).
type deadAccess struct{ lead, order string }

var (
	// By ids: the primary key, one probe per id.
	deadByIDs = deadAccess{`id = ANY($1)`, `id`}
	// By destination and reason: the index on both. The destination is compared
	// as claimSQL does it (sameDestination): given a plain equality, the planner may
	// walk the primary key in id order instead, through every dead row.
	deadByDestinationReason = deadAccess{`destination = $2 AND ` + reasonLead, `destination, ` + reasonExpr + `, id`}
	// By destination: the dead-destination index.
	deadByDestination = deadAccess{sameDestination("$2::text"), `destination, id`}
	// By reason: the dead-reason index. A row whose last_error matches the reason
	// has the reason's first part as its own.
	deadByReason = deadAccess{reasonLead, reasonExpr + `, id`}
	// Every dead row: the settled index's dead part, in id order (status first).
	deadAll = deadAccess{``, `id`}
)

// reasonLead is true of every row whose last_error matches the reason $3.
const reasonLead = reasonExpr + ` = split_part($3::text, ': ', 1)`

// access returns how the rows f matches are found.
func access(f outbox.DeadFilter) deadAccess {
	dest := f.Destination != (transport.Destination{})
	switch {
	case len(f.IDs) > 0:
		return deadByIDs
	case dest && f.Reason != "":
		return deadByDestinationReason
	case dest:
		return deadByDestination
	case f.Reason != "":
		return deadByReason
	}
	return deadAll
}

// where is the filter with a's lead condition.
func (a deadAccess) where() string {
	if a.lead == "" {
		return deadFilter
	}
	return deadFilter + ` AND ` + a.lead
}

// deadPageSQL selects cols of one page of dead rows ($4 after, $5 limit) by
// ascending id, found as a says.
func deadPageSQL(cols string, a deadAccess) string {
	return `SELECT ` + cols + ` FROM ` + Table + ` o WHERE ` + a.where() + ` AND id > $4 ORDER BY ` + a.order + ` LIMIT $5`
}

// summaryColumns are columns without the payload, and its length last: PostgreSQL
// knows a value's length from its header, without reading (or de-TOASTing) it.
var summaryColumns = strings.Replace(columns, "payload", "NULL::bytea", 1) + `, octet_length(payload)`

// DeadRows implements outbox.DeadLetters.
func (s *Store) DeadRows(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.Record, error) {
	if err := storekit.CheckDeadPage(f, p); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql(deadPageSQL(columns, access(f))), append(filterArgs(f), p.After, storekit.PageSize(p))...)
	if err != nil {
		return nil, fmt.Errorf("postgres: dead rows: %w", err)
	}
	recs, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.Record, error) { return scanRecord(row) })
	if err != nil {
		return nil, fmt.Errorf("postgres: dead rows: %w", err)
	}
	return recs, nil
}

// DeadSummaries implements outbox.DeadSummaries: the page DeadRows returns, without
// reading the payloads.
func (s *Store) DeadSummaries(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.DeadSummary, error) {
	if err := storekit.CheckDeadPage(f, p); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql(deadPageSQL(summaryColumns, access(f))), append(filterArgs(f), p.After, storekit.PageSize(p))...)
	if err != nil {
		return nil, fmt.Errorf("postgres: dead rows: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.DeadSummary, error) {
		var size *int64
		r, err := scanRecord(row, &size)
		d := outbox.DeadSummary{Record: r}
		if size != nil {
			d.ValueBytes = int(*size)
		}
		return d, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: dead rows: %w", err)
	}
	return out, nil
}

// requeueBatch bounds the rows one Requeue statement changes, so that no statement
// holds many row locks for long.
const requeueBatch = 1000

// requeueStatement makes up to $5 dead rows the filter matches pending, visible at
// $4, found as a says. It waits for rows another statement holds rather than skip
// them, so that none is missed.
func requeueStatement(a deadAccess) string {
	return `
WITH picked AS (
	SELECT id FROM ` + Table + ` o WHERE ` + a.where() + ` ORDER BY ` + a.order + ` LIMIT $5 FOR UPDATE
)
UPDATE ` + Table + ` o SET status = 'pending', visible_after = $4, attempts = 0, deferrals = 0,
	first_deferred_at = NULL, settled_at = NULL, lease_owner = NULL, lease_until = NULL
FROM picked WHERE o.id = picked.id AND o.status = 'dead'`
}

// Requeue implements outbox.DeadLetters, in statements of at most 1,000 rows each.
// Rows requeued before an error stay requeued; the count says how many.
func (s *Store) Requeue(ctx context.Context, f outbox.DeadFilter, now time.Time) (int, error) {
	if err := storekit.CheckRequeue(f); err != nil {
		return 0, err
	}
	args := append(filterArgs(f), now, requeueBatch)
	total := 0
	for {
		tag, err := s.db.Exec(ctx, s.sql(requeueStatement(access(f))), args...)
		if err != nil {
			return total, fmt.Errorf("postgres: requeue: %w", err)
		}
		n := int(tag.RowsAffected())
		total += n
		if n < requeueBatch {
			return total, nil
		}
	}
}
