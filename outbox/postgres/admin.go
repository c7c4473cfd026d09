package postgres

import (
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"
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
	if err := outbox.CheckDeleteLimit(limit); err != nil {
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
// (outbox.DeadFilter.MatchesReason).
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

// reasonExpr is outbox.DeadReason in SQL: the text of last_error before its first
// ': '. The dead-reason index is on it.
const reasonExpr = `split_part(coalesce(last_error, ''), ': ', 1)`

// deadReasonFilter is deadFilter for a filter that sets a reason ($3), written so that
// the dead-reason index serves it: a row whose last_error matches the reason
// (outbox.DeadFilter.MatchesReason) has the reason's first part as its own, so the
// index narrows the rows to those of one reason before the exact test. A reason that
// matches nothing then reads nothing, however many dead rows there are.
const deadReasonFilter = `status = 'dead' AND ($1::bigint[] IS NULL OR id = ANY($1))
	AND ($2::text IS NULL OR destination = $2) AND ` + reasonExpr + ` = split_part($3::text, ': ', 1)
	AND (last_error = $3 OR starts_with(last_error, $3 || ': '))`

// deadPageSQL selects cols of one page of dead rows ($4 after, $5 limit) by ascending
// id; with a reason, along the dead-reason index (ordered by the reason, which is one
// value, then id: the index's order, so no plan needs to sort or to scan other reasons).
func deadPageSQL(cols string, byReason bool) string {
	if !byReason {
		return `SELECT ` + cols + ` FROM ` + Table + ` WHERE ` + deadFilter + ` AND id > $4 ORDER BY id LIMIT $5`
	}
	return `SELECT ` + cols + ` FROM ` + Table + ` WHERE ` + deadReasonFilter + ` AND id > $4 ORDER BY ` + reasonExpr + `, id LIMIT $5`
}

// summaryColumns are columns without the payload, and its length last: PostgreSQL
// knows a value's length from its header, without reading (or de-TOASTing) it.
var summaryColumns = strings.Replace(columns, "payload", "NULL::bytea", 1) + `, octet_length(payload)`

var (
	deadRowsSQL          = deadPageSQL(columns, false)
	deadRowsReasonSQL    = deadPageSQL(columns, true)
	deadSummarySQL       = deadPageSQL(summaryColumns, false)
	deadSummaryReasonSQL = deadPageSQL(summaryColumns, true)
)

// pick returns byReason when f sets a reason, else plain.
func pick(f outbox.DeadFilter, plain, byReason string) string {
	if f.Reason != "" {
		return byReason
	}
	return plain
}

// DeadRows implements outbox.DeadLetters.
func (s *Store) DeadRows(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.Record, error) {
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql(pick(f, deadRowsSQL, deadRowsReasonSQL)), append(filterArgs(f), p.After, p.Size())...)
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
	if err := f.Validate(); err != nil {
		return nil, err
	}
	if err := p.Validate(); err != nil {
		return nil, err
	}
	rows, err := s.db.Query(ctx, s.sql(pick(f, deadSummarySQL, deadSummaryReasonSQL)), append(filterArgs(f), p.After, p.Size())...)
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

// requeueSQL makes up to $5 matching dead rows pending, visible at $4. It waits for
// rows another statement holds rather than skip them, so that none is missed.
func requeueStatement(filter string) string {
	return `
WITH picked AS (
	SELECT id FROM ` + Table + ` WHERE ` + filter + ` ORDER BY id LIMIT $5 FOR UPDATE
)
UPDATE ` + Table + ` o SET status = 'pending', visible_after = $4, attempts = 0, deferrals = 0,
	first_deferred_at = NULL, settled_at = NULL, lease_owner = NULL, lease_until = NULL
FROM picked WHERE o.id = picked.id AND o.status = 'dead'`
}

var (
	requeueSQL       = requeueStatement(deadFilter)
	requeueReasonSQL = requeueStatement(deadReasonFilter) // along the dead-reason index
)

// Requeue implements outbox.DeadLetters, in statements of at most 1,000 rows each.
// Rows requeued before an error stay requeued; the count says how many.
func (s *Store) Requeue(ctx context.Context, f outbox.DeadFilter, now time.Time) (int, error) {
	if err := outbox.CheckRequeue(f); err != nil {
		return 0, err
	}
	args := append(filterArgs(f), now, requeueBatch)
	total := 0
	for {
		tag, err := s.db.Exec(ctx, s.sql(pick(f, requeueSQL, requeueReasonSQL)), args...)
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
