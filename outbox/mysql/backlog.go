package mysql

import (
	"context"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// Backlog implements outbox.Store; the age is measured on the Store's clock. It
// counts along the pending index and reads the pending rows for their creation time.
func (s *Store) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var first timeCol
	err = s.db.QueryRowContext(ctx, s.sql(`SELECT COUNT(*), MIN(created_at) FROM `+Table+` WHERE status = 'pending'`)).Scan(&pending, &first)
	if err != nil {
		return 0, 0, fmt.Errorf("mysql: backlog: %w", err)
	}
	if !first.t.IsZero() {
		oldest = max(s.now().Sub(first.t), 0)
	}
	return pending, oldest, nil
}

// BacklogByDestination returns the pending rows per destination, in one grouped
// query over the pending rows, in the order of each destination's oldest pending row
// (as the memory store lists them); the ages are measured on the Store's clock. Rows whose
// destination does not parse are left out (the dispatcher makes them dead). Its
// signature fits telemetry.WithOutboxBacklog, which reuses a reading for an interval
// so that scrapes do not each run the query.
func (s *Store) BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := s.db.QueryContext(ctx, s.sql(`SELECT destination, COUNT(*), MIN(created_at) FROM `+Table+`
		WHERE status = 'pending' GROUP BY destination ORDER BY MIN(id)`))
	if err != nil {
		return nil, fmt.Errorf("mysql: backlog by destination: %w", err)
	}
	defer rows.Close()
	now := s.now()
	var out []outbox.DestinationBacklog
	for rows.Next() {
		var (
			dest    string
			pending int64
			first   timeCol
		)
		if err := rows.Scan(&dest, &pending, &first); err != nil {
			return nil, fmt.Errorf("mysql: backlog by destination: %w", err)
		}
		d, err := transport.ParseDestination(dest)
		if err != nil {
			continue
		}
		out = append(out, outbox.DestinationBacklog{Destination: d, Pending: pending, Oldest: max(now.Sub(first.t), 0)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("mysql: backlog by destination: %w", err)
	}
	return out, nil
}
