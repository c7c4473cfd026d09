package mysql

import (
	"context"
	"database/sql"
	"fmt"
	"strings"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// The write-backs of a claim change rows by primary key only, fenced by the claim's
// token (heldBy): every write that settles or releases a row clears its lease_owner,
// so a row a token still leases is pending. Statements that change rows by primary
// key take no gap locks at any isolation level, so they run as they come
// (autocommit); the ones that read a range (Hold's, Release's) run at READ COMMITTED.
//
// Every one of them runs on a connection whose lock waits are bounded on the server
// (withConn): the driver ends a statement whose context ended by closing its
// connection, which a statement waiting for a row lock does not notice, so without
// the bound an UPDATE the relay gave up on waited out the server's
// innodb_lock_wait_timeout (50 s by default) holding the locks of the rows it had
// changed, and the relay's next write-backs queued behind it, one abandoned
// statement a second (TestLockWaitsEndInErrorsAndLockedRowsAreSkipped).

// heldBy limits a write to the rows the claim with the last ? token still leases.
const heldBy = ` AND lease_owner = ?`

// exec runs one statement, bounded by the Store's timeout on the client and on the
// server (withConn), at READ COMMITTED, and returns the rows it changed. An UPDATE
// ... WHERE id IN (...) of many ids on a small table is a table scan, which at
// REPEATABLE READ locks every row it reads: a relay's write-back waited for rows
// another session held that were none of its own. At READ COMMITTED a row locked by
// someone else is tested on its last committed version and passed over when it does
// not match.
func (s *Store) exec(ctx context.Context, stmt string, args ...any) (n int, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	err = s.withConn(ctx, func(conn *sql.Conn) error {
		if _, err := conn.ExecContext(ctx, readCommitted); err != nil {
			return err
		}
		res, err := conn.ExecContext(ctx, stmt, args...)
		if err != nil {
			return err
		}
		rows, err := res.RowsAffected()
		n = int(rows)
		return err
	})
	return n, err
}

// MarkPublished implements outbox.Store.
func (s *Store) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error) {
	if len(ids) == 0 {
		return 0, nil
	}
	args := append([]any{dbTime(now)}, int64Args(ids)...)
	n, err := s.exec(ctx, s.sql(`UPDATE `+Table+` SET status = 'published', settled_at = ?, lease_owner = NULL, lease_until = NULL
		WHERE id IN (`+placeholders(len(ids))+`)`+heldBy), append(args, token)...)
	if err != nil {
		return 0, fmt.Errorf("mysql: mark published: %w", err)
	}
	return n, nil
}

// Defer implements outbox.Store with one UPDATE statement for all the rows.
func (s *Store) Defer(ctx context.Context, d outbox.Deferral) (int, error) {
	if len(d.IDs) == 0 {
		return 0, nil
	}
	args := append([]any{dbTime(d.Now)}, int64Args(d.IDs)...)
	n, err := s.exec(ctx, s.sql(`UPDATE `+Table+` SET deferrals = deferrals + 1,
		first_deferred_at = COALESCE(first_deferred_at, ?), lease_owner = NULL, lease_until = NULL
		WHERE id IN (`+placeholders(len(d.IDs))+`)`+heldBy), append(args, d.Token)...)
	if err != nil {
		return 0, fmt.Errorf("mysql: defer: %w", err)
	}
	return n, nil
}

// failSQL applies failures given as a derived table f(id, retry_at, err) (failRow
// per failure, joined by UNION ALL) and sets status and settled_at from the two
// ?s before the token.
const failSQL = `UPDATE ` + Table + ` o JOIN (FAILURES) f ON o.id = f.id SET
	o.attempts = o.attempts + 1, o.visible_after = f.retry_at, o.last_error = f.err,
	o.status = ?, o.settled_at = ?, o.lease_owner = NULL, o.lease_until = NULL
	WHERE o.lease_owner = ?`

const failRow = `SELECT CAST(? AS SIGNED) AS id, CAST(? AS DATETIME(6)) AS retry_at, CAST(? AS BINARY) AS err`

// Fail implements outbox.Store with one UPDATE statement for the rows it makes dead
// and one for those it fails for a retry: without RETURNING in MariaDB's UPDATE, each
// statement's count of changed rows says how many of which.
func (s *Store) Fail(ctx context.Context, token string, failures []outbox.Failure) (failed, dead int, err error) {
	var retry, died []outbox.Failure
	for _, f := range failures {
		if f.Dead {
			died = append(died, f)
		} else {
			retry = append(retry, f)
		}
	}
	apply := func(fs []outbox.Failure, status outbox.Status, settled any) (int, error) {
		if len(fs) == 0 {
			return 0, nil
		}
		args := make([]any, 0, 3*len(fs)+3)
		for _, f := range fs {
			args = append(args, f.ID, dbTime(f.RetryAt), []byte(f.Err))
		}
		rows := failRow
		for range len(fs) - 1 {
			rows += ` UNION ALL ` + failRow
		}
		return s.exec(ctx, strings.Replace(s.sql(failSQL), "FAILURES", rows, 1), append(args, string(status), settled, token)...)
	}
	if dead, err = apply(died, outbox.StatusDead, dbTime(s.now())); err != nil {
		return 0, 0, fmt.Errorf("mysql: fail: %w", err)
	}
	if failed, err = apply(retry, outbox.StatusPending, nil); err != nil {
		return 0, dead, fmt.Errorf("mysql: fail: %w", err)
	}
	return failed, dead, nil
}

// holdUpsertSQL records the hold of a destination: held_until is the request's
// Until if its token holds the probe, else the later of the two; the probe's token is
// cleared when it is the request's; held_since is kept; the reason is the request's.
// The arguments: destination, until, now, reason, then token, until, until, token,
// reason (VALUES() in an upsert is deprecated in MySQL 8, and MariaDB has not the
// row alias that replaces it).
const holdUpsertSQL = `INSERT INTO ` + Table + `_hold (destination, held_until, held_since, reason) VALUES (?, ?, ?, ?)
	ON DUPLICATE KEY UPDATE
		held_until = IF(probe_token <=> ?, ?, GREATEST(held_until, ?)),
		probe_token = IF(probe_token <=> ?, NULL, probe_token),
		reason = ?`

// holdExpireSQL makes dead the destination's pending rows that no other claim leases
// and whose held wait (from the later of their creation and the hold's start) is
// longer than MaxDeferral: the arguments are the reason, now, destination, the
// latest start of such a wait (now - MaxDeferral), now and the token.
const holdExpireSQL = `UPDATE ` + Table + ` SET status = 'dead', last_error = ?, settled_at = ?, lease_owner = NULL, lease_until = NULL
	WHERE status = 'pending' AND destination = ? AND created_at < ?
		AND (lease_until IS NULL OR lease_until <= ? OR lease_owner = ?)`

// Hold implements outbox.Store in one READ COMMITTED transaction: the hold's
// upsert, and, once the hold is older than h.MaxDeferral, the dead rows.
func (s *Store) Hold(ctx context.Context, h outbox.Hold) (dead int, err error) {
	d, now, until := h.Destination.String(), dbTime(h.Now), dbTime(h.Until)
	err = s.tx(ctx, func(ctx context.Context, q querier) error {
		if _, err := q.ExecContext(ctx, s.sql(holdUpsertSQL), d, until, now, []byte(h.Reason), h.Token, until, until, h.Token, []byte(h.Reason)); err != nil {
			return err
		}
		var since timeCol
		if err := q.QueryRowContext(ctx, s.sql(`SELECT held_since FROM `+Table+`_hold WHERE destination = ?`), d).Scan(&since); err != nil {
			return err
		}
		latest := microseconds(h.Now).Add(-h.MaxDeferral)
		if !since.t.Before(latest) { // the hold itself is not older than MaxDeferral
			return nil
		}
		res, err := q.ExecContext(ctx, s.sql(holdExpireSQL), outbox.ReasonDeferralExhausted, now, d, dbTime(latest), now, h.Token)
		if err != nil {
			return err
		}
		n, err := res.RowsAffected()
		dead = int(n)
		return err
	})
	if err != nil {
		return 0, fmt.Errorf("mysql: hold %s: %w", h.Destination, err)
	}
	return dead, nil
}

// Unhold implements outbox.Store.
func (s *Store) Unhold(ctx context.Context, d transport.Destination, token string) error {
	if _, err := s.exec(ctx, s.sql(`DELETE FROM `+Table+`_hold WHERE destination = ? AND probe_token = ?`), d.String(), token); err != nil {
		return fmt.Errorf("mysql: unhold %s: %w", d, err)
	}
	return nil
}

// Release implements outbox.Store. It reads the pending rows (no index holds the
// lease's owner, which every claim would then rewrite), at READ COMMITTED so that it
// locks only the rows it changes.
func (s *Store) Release(ctx context.Context, token string) error {
	err := s.tx(ctx, func(ctx context.Context, q querier) error {
		_, err := q.ExecContext(ctx, s.sql(`UPDATE `+Table+` SET lease_owner = NULL, lease_until = NULL
			WHERE status = 'pending' AND lease_owner = ?`), token)
		return err
	})
	if err != nil {
		return fmt.Errorf("mysql: release: %w", err)
	}
	return nil
}
