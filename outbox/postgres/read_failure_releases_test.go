package postgres_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/outbox/storekit"
)

// A read that fails part-way (Get of a row whose status this version does not know,
// written by a later version) returns a *storekit.UnknownStatusError naming the row
// and gives its connection back to the pool.
func TestAReadThatFailsPartWayGivesItsConnectionBack(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	id := mpClaimOne(t, s, pool, "mpread", time.Now().Add(time.Minute))
	if _, err := pool.Exec(ctx, "ALTER TABLE "+postgres.Table+" DROP CONSTRAINT brokerguard_outbox_status_check"); err != nil {
		t.Fatal(err)
	}
	if _, err := pool.Exec(ctx, "UPDATE "+postgres.Table+" SET status = 'archived' WHERE id = $1", id); err != nil {
		t.Fatal(err)
	}
	_, err := s.Get(ctx, id)
	var unknown *storekit.UnknownStatusError
	if !errors.As(err, &unknown) {
		t.Fatalf("Get of a row with status 'archived': %v, want a *storekit.UnknownStatusError", err)
	}
	if n := pool.Stat().AcquiredConns(); n != 0 {
		t.Fatalf("%d connections still acquired after the read failed, want 0", n)
	}
}
