package postgres_test

import (
	"context"
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/transport"
)

// DeadSummaries gives each dead row's payload size, without the payload itself.
func TestDeadSummariesGiveThePayloadSizeNotThePayload(t *testing.T) {
	s, pool := pgTestStore(t)
	ctx := context.Background()
	ids := pgDeadRows(t, s, pool, transport.Destination{Broker: "kafka", Name: "orders"}, 2, outbox.ReasonAttemptsExhausted)
	if _, err := pool.Exec(ctx, "UPDATE "+postgres.Table+" SET payload = 'hello' WHERE id = $1", ids[0]); err != nil {
		t.Fatal(err)
	}
	sums, err := s.DeadSummaries(ctx, outbox.DeadFilter{}, outbox.Page{Limit: 10})
	if err != nil || len(sums) != 2 {
		t.Fatalf("DeadSummaries = %d rows, %v; want 2", len(sums), err)
	}
	for i, want := range []int{5, 0} {
		if sums[i].ID != ids[i] || sums[i].ValueBytes != want || len(sums[i].Message.Value) != 0 {
			t.Errorf("summary %d: id %d, %d bytes, value %q; want id %d, %d bytes and no value", i, sums[i].ID, sums[i].ValueBytes, sums[i].Message.Value, ids[i], want)
		}
	}
}
