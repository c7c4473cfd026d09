package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/transport"
)

// DeleteSettled implements outbox.Purger with two short DELETE statements (published
// rows, then dead ones), oldest first along the settled index, at READ COMMITTED.
func (s *Store) DeleteSettled(ctx context.Context, publishedBefore, deadBefore time.Time, limit int) (int, error) {
	if err := storekit.CheckDeleteLimit(limit); err != nil {
		return 0, err
	}
	total := 0
	err := s.tx(ctx, func(ctx context.Context, q querier) error {
		for _, c := range []struct {
			status outbox.Status
			before time.Time
		}{{outbox.StatusPublished, publishedBefore}, {outbox.StatusDead, deadBefore}} {
			if c.before.IsZero() || limit == 0 {
				continue
			}
			res, err := q.ExecContext(ctx, s.sql(`DELETE FROM `+Table+` WHERE status = ? AND settled_at < ?
				ORDER BY status, settled_at, id LIMIT `+strconv.Itoa(limit)), string(c.status), dbTime(c.before))
			if err != nil {
				return err
			}
			n, err := res.RowsAffected()
			if err != nil {
				return err
			}
			total += int(n)
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("mysql: delete settled rows: %w", err)
	}
	return total, nil
}

// deadWhere is the WHERE clause of a DeadFilter and its arguments. With a reason it
// reads the dead-reason index: a row whose last_error matches the reason
// (storekit.MatchesReason) has the reason's first part as its dead_reason,
// so the index narrows the rows to those of one reason before the exact test, and a
// reason that matches nothing reads nothing, however many dead rows there are.
func deadWhere(f outbox.DeadFilter) (string, []any) {
	var (
		b    strings.Builder
		args []any
	)
	b.WriteString(`status = 'dead'`)
	if len(f.IDs) > 0 {
		b.WriteString(` AND id IN (` + placeholders(len(f.IDs)) + `)`)
		args = append(args, int64Args(f.IDs)...)
	}
	if f.Destination != (transport.Destination{}) {
		b.WriteString(` AND destination = ?`)
		args = append(args, f.Destination.String())
	}
	if f.Reason != "" {
		b.WriteString(` AND dead_reason = ? AND (last_error = ? OR LEFT(last_error, ?) = ?)`)
		prefix := f.Reason + ": "
		args = append(args, []byte(indexedReason(f.Reason)), []byte(f.Reason), len(prefix), []byte(prefix))
	}
	return b.String(), args
}

// indexedReason is the dead_reason of a row whose last_error is lastError, as the
// generated column computes it: storekit.DeadReason, cut to 255 bytes.
func indexedReason(lastError string) string {
	r := storekit.DeadReason(lastError)
	return r[:min(len(r), 255)]
}

// deadPage returns the SQL and arguments of one page of dead rows, columns cols.
func deadPage(cols string, f outbox.DeadFilter, p outbox.Page) (string, []any) {
	where, args := deadWhere(f)
	return `SELECT ` + cols + ` FROM ` + Table + ` WHERE ` + where + ` AND id > ? ORDER BY id LIMIT ?`, append(args, p.After, storekit.PageSize(p))
}

// DeadRows implements outbox.DeadLetters.
func (s *Store) DeadRows(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.Record, error) {
	var out []outbox.Record
	err := s.readDead(ctx, columns, f, p, func(rows *sql.Rows) error {
		r, err := scanRecord(rows)
		out = append(out, r)
		return err
	})
	return out, err
}

// summaryColumns are columns without the payload, and its length last.
var summaryColumns = strings.Replace(columns, "payload", "NULL", 1) + `, LENGTH(payload)`

// DeadSummaries implements outbox.DeadSummaries: the page DeadRows returns, without
// sending the payloads.
func (s *Store) DeadSummaries(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.DeadSummary, error) {
	var out []outbox.DeadSummary
	err := s.readDead(ctx, summaryColumns, f, p, func(rows *sql.Rows) error {
		var size int64
		r, err := scanRecord(rows, &size)
		r.Message.Value = nil
		out = append(out, outbox.DeadSummary{Record: r, ValueBytes: int(size)})
		return err
	})
	return out, err
}

// readDead runs one page's query and hands each row to scan.
func (s *Store) readDead(ctx context.Context, cols string, f outbox.DeadFilter, p outbox.Page, scan func(*sql.Rows) error) error {
	if err := storekit.CheckDeadPage(f, p); err != nil {
		return err
	}
	ctx, cancel := s.bound(ctx)
	defer cancel()
	q, args := deadPage(cols, f, p)
	rows, err := s.db.QueryContext(ctx, s.sql(q), args...)
	if err != nil {
		return fmt.Errorf("mysql: dead rows: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		if err := scan(rows); err != nil {
			return fmt.Errorf("mysql: dead rows: %w", err)
		}
	}
	if err := rows.Err(); err != nil {
		return fmt.Errorf("mysql: dead rows: %w", err)
	}
	return nil
}

// requeueBatch bounds the rows one Requeue statement changes, so that no statement
// holds many row locks for long.
const requeueBatch = 1000

// Requeue implements outbox.DeadLetters, in statements of at most 1,000 rows each,
// each its own READ COMMITTED transaction; a statement waits for rows another one
// holds rather than skip them, so that none is missed. Rows requeued before an error
// stay requeued; the count says how many.
func (s *Store) Requeue(ctx context.Context, f outbox.DeadFilter, now time.Time) (int, error) {
	if err := storekit.CheckRequeue(f); err != nil {
		return 0, err
	}
	where, args := deadWhere(f)
	stmt := s.sql(`UPDATE ` + Table + ` SET status = 'pending', visible_after = ?, attempts = 0, deferrals = 0,
		first_deferred_at = NULL, settled_at = NULL, lease_owner = NULL, lease_until = NULL
		WHERE ` + where + ` ORDER BY id LIMIT ` + strconv.Itoa(requeueBatch))
	args = append([]any{dbTime(now)}, args...)
	total := 0
	for {
		var n int64
		err := s.tx(ctx, func(ctx context.Context, q querier) error {
			res, err := q.ExecContext(ctx, stmt, args...)
			if err == nil {
				n, err = res.RowsAffected()
			}
			return err
		})
		if err != nil {
			return total, fmt.Errorf("mysql: requeue: %w", err)
		}
		total += int(n)
		if n < requeueBatch {
			return total, nil
		}
	}
}
