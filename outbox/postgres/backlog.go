package postgres

import (
	"context"
	"fmt"
	"time"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

// BacklogByDestination returns the pending rows per destination, in one grouped
// query over the pending rows; the ages are measured on the Store's clock. Rows whose
// destination does not parse are left out (the dispatcher makes them dead). Its
// signature fits telemetry.WithOutboxBacklog, which reuses a reading for an interval
// so that scrapes do not each run the query.
func (s *Store) BacklogByDestination(ctx context.Context) ([]outbox.DestinationBacklog, error) {
	rows, err := s.db.Query(ctx, s.sql(`SELECT destination, count(*), min(created_at) FROM `+Table+`
		WHERE status = 'pending' GROUP BY destination`))
	if err != nil {
		return nil, fmt.Errorf("postgres: backlog by destination: %w", err)
	}
	defer rows.Close()
	now := s.now()
	var out []outbox.DestinationBacklog
	for rows.Next() {
		var (
			dest    string
			pending int64
			first   time.Time
		)
		if err := rows.Scan(&dest, &pending, &first); err != nil {
			return nil, fmt.Errorf("postgres: backlog by destination: %w", err)
		}
		d, err := transport.ParseDestination(dest)
		if err != nil {
			continue
		}
		out = append(out, outbox.DestinationBacklog{Destination: d, Pending: pending, Oldest: max(now.Sub(first), 0)})
	}
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("postgres: backlog by destination: %w", err)
	}
	return out, nil
}
