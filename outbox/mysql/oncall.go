package mysql

import (
	"context"
	"fmt"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// Holds implements outbox.OnCall, by destination in byte order (the column is
// binary). A hold whose destination does not parse is left out: no claim would take
// its rows either.
func (s *Store) Holds(ctx context.Context) ([]outbox.HoldInfo, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.sql(`SELECT destination, held_until, held_since, reason FROM `+Table+`_hold ORDER BY destination`))
	if err != nil {
		return nil, fmt.Errorf("mysql: holds: %w", err)
	}
	defer rows.Close()
	var out []outbox.HoldInfo
	for rows.Next() {
		var (
			dest         string
			until, since timeCol
			reason       []byte
		)
		if err := rows.Scan(&dest, &until, &since, &reason); err != nil {
			return nil, fmt.Errorf("mysql: holds: %w", err)
		}
		d, err := transport.ParseDestination(dest)
		if err != nil {
			continue
		}
		out = append(out, outbox.HoldInfo{Destination: d, Until: until.t, Since: since.t, Unusable: string(reason)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: holds: %w", err)
	}
	return out, nil
}

// DeadCounts implements outbox.OnCall with one grouped query along the dead-reason
// index, by reason in byte order.
func (s *Store) DeadCounts(ctx context.Context) ([]outbox.DeadCount, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.sql(`SELECT dead_reason, COUNT(*) FROM `+Table+`
		WHERE dead_reason IS NOT NULL GROUP BY dead_reason ORDER BY dead_reason`))
	if err != nil {
		return nil, fmt.Errorf("mysql: dead counts: %w", err)
	}
	defer rows.Close()
	var out []outbox.DeadCount
	for rows.Next() {
		var c outbox.DeadCount
		if err := rows.Scan(&c.Reason, &c.Rows); err != nil {
			return nil, fmt.Errorf("mysql: dead counts: %w", err)
		}
		out = append(out, c)
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: dead counts: %w", err)
	}
	return out, nil
}
