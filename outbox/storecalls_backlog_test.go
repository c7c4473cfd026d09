package outbox

import (
	"context"
	"errors"
	"testing"
	"time"
)

// backlogStore answers Backlog with its fields; its other Store methods are not called.
type backlogStore struct {
	Store
	pending int64
	oldest  time.Duration
	err     error
}

var errObBacklog = errors.New("backlog query failed")

func (s backlogStore) Backlog(context.Context) (int64, time.Duration, error) {
	return s.pending, s.oldest, s.err
}

// obOps counts RecordStoreError calls by operation.
type obOps map[string]int

func (o obOps) RecordStoreError(op string) { o[op]++ }

// The Processor's view of its store answers Backlog as the store does, and turns
// its failure into a counted StoreError of the backlog operation.
func TestBoundedStoreBacklog(t *testing.T) {
	ctx := context.Background()
	ops := obOps{}
	pending, oldest, err := boundedStore{inner: backlogStore{pending: 1, oldest: time.Minute}, timeout: time.Second, hooks: ops}.Backlog(ctx)
	if pending != 1 || oldest != time.Minute || err != nil {
		t.Errorf("Backlog = %d, %v, %v; want 1, 1m, nil", pending, oldest, err)
	}
	_, _, err = boundedStore{inner: backlogStore{err: errObBacklog}, timeout: time.Second, hooks: ops}.Backlog(ctx)
	var se *StoreError
	if !errors.As(err, &se) || se.Op != OpBacklog || !errors.Is(err, errObBacklog) {
		t.Errorf("Backlog of a failing store = %v, want its StoreError", err)
	}
	if ops[OpBacklog] != 1 {
		t.Errorf("RecordStoreError(backlog) called %d times, want 1", ops[OpBacklog])
	}
}
