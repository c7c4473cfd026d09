package postgres

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"

	"github.com/brokerguard/brokerguard/outbox"

	"github.com/brokerguard/brokerguard/transport"
)

// The ORDER BY uses the C collation so that the order is Go's byte order, as the
// memory store sorts.
const holdsSQL = `SELECT destination, held_until, held_since, reason FROM ` + HoldTable + ` ORDER BY destination COLLATE "C"`

// Holds implements outbox.OnCall. A hold whose destination does not parse is left
// out: no claim would take its rows either.
func (s *Store) Holds(ctx context.Context) ([]outbox.HoldInfo, error) {
	rows, err := s.db.Query(ctx, s.sql(holdsSQL))
	if err != nil {
		return nil, fmt.Errorf("postgres: holds: %w", err)
	}
	defer rows.Close()
	var out []outbox.HoldInfo
	for rows.Next() {
		var (
			dest string
			h    outbox.HoldInfo
		)
		if err := rows.Scan(&dest, &h.Until, &h.Since, &h.Unusable); err != nil {
			return nil, fmt.Errorf("postgres: holds: %w", err)
		}
		if h.Destination, err = transport.ParseDestination(dest); err != nil {
			continue
		}
		out = append(out, h)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: holds: %w", err)
	}
	return out, nil
}

// deadCountsSQL groups the dead rows by the text of last_error before its first ': '
// (storekit.DeadReason), along the settled index's status prefix.
const deadCountsSQL = `SELECT split_part(coalesce(last_error, ''), ': ', 1) COLLATE "C" AS reason, count(*)
	FROM ` + Table + ` WHERE status = 'dead' GROUP BY reason ORDER BY reason`

// DeadCounts implements outbox.OnCall with one grouped query.
func (s *Store) DeadCounts(ctx context.Context) ([]outbox.DeadCount, error) {
	rows, err := s.db.Query(ctx, s.sql(deadCountsSQL))
	if err != nil {
		return nil, fmt.Errorf("postgres: dead counts: %w", err)
	}
	out, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (outbox.DeadCount, error) {
		var c outbox.DeadCount
		err := row.Scan(&c.Reason, &c.Rows)
		return c, err
	})
	if err != nil {
		return nil, fmt.Errorf("postgres: dead counts: %w", err)
	}
	return out, nil
}
