package outbox

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/transport"
)

// obBacklogDown is a memory store whose Backlog fails.
type obBacklogDown struct{ *MemoryStore }

var errObBacklog = errors.New("backlog query failed")

func (obBacklogDown) Backlog(context.Context) (int64, time.Duration, error) {
	return 0, 0, errObBacklog
}

// obOps counts RecordStoreError calls by operation.
type obOps map[string]int

func (o obOps) RecordStoreError(op string) { o[op]++ }

// The Processor's view of its store answers Backlog as the store does, and turns
// its failure into a counted StoreError of the backlog operation.
func TestBoundedStoreBacklog(t *testing.T) {
	ctx := context.Background()
	clock := fakeclock.New(time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC))
	mem := NewMemoryStore(clock)
	if _, err := mem.Enqueue(ctx, Entry{Destination: transport.Destination{Broker: "kafka", Name: "orders"}}); err != nil {
		t.Fatal(err)
	}
	clock.Advance(time.Minute)
	ops := obOps{}
	pending, oldest, err := boundedStore{inner: mem, timeout: time.Second, hooks: ops}.Backlog(ctx)
	if pending != 1 || oldest != time.Minute || err != nil {
		t.Errorf("Backlog = %d, %v, %v; want 1, 1m, nil", pending, oldest, err)
	}
	_, _, err = boundedStore{inner: obBacklogDown{mem}, timeout: time.Second, hooks: ops}.Backlog(ctx)
	var se *StoreError
	if !errors.As(err, &se) || se.Op != OpBacklog || !errors.Is(err, errObBacklog) {
		t.Errorf("Backlog of a failing store = %v, want its StoreError", err)
	}
	if ops[OpBacklog] != 1 {
		t.Errorf("RecordStoreError(backlog) called %d times, want 1", ops[OpBacklog])
	}
}
