package mysql

import (
	"context"
	"database/sql"

	"github.com/brokerguard/brokerguard/outbox"
)

// ClaimIn runs the statements of Claim in tx, which the test commits or rolls back,
// so that a test can look at the locks a claim holds before it commits.
func (s *Store) ClaimIn(ctx context.Context, tx *sql.Tx, r outbox.ClaimRequest) ([]outbox.Record, error) {
	return s.claim(ctx, tx, r)
}

// ClaimIsolation is the isolation level of Claim's transaction.
const ClaimIsolation = sql.LevelReadCommitted
