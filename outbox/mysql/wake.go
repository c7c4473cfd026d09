package mysql

import (
	"context"
	"database/sql"
	"sync"

	"github.com/brokerguard/brokerguard/outbox"
)

// wakers are the Listen calls of a Store's CommitWaker that are running: each is
// the wake function its Processor gave.
type wakers struct {
	mu   sync.Mutex // guards subs
	subs map[*func()]struct{}
}

// Wake signals every Processor of this process that uses the Store's CommitWaker
// that rows may be due, so that each claims at once rather than at its next poll.
// Call it after the transaction that enqueued commits (Commit does); a signal for a
// transaction that then rolled back costs one empty claim. It never blocks.
func (s *Store) Wake() {
	s.wake.mu.Lock()
	fs := make([]func(), 0, len(s.wake.subs))
	for f := range s.wake.subs {
		fs = append(fs, *f)
	}
	s.wake.mu.Unlock()
	for _, f := range fs {
		f()
	}
}

// Commit commits tx and, when it committed, calls Wake: use it in place of
// tx.Commit after Enqueue.
func (s *Store) Commit(tx *sql.Tx) error {
	if err := tx.Commit(); err != nil {
		return err
	}
	s.Wake()
	return nil
}

// CommitWaker implements outbox.CommitWaker: a Processor given no WithWaker wakes on
// the Store's Wake (and Commit), and polls as the safety net, which is the only way
// it learns of rows another process committed.
func (s *Store) CommitWaker() outbox.Waker { return storeWaker{s} }

type storeWaker struct{ s *Store }

// Listen implements outbox.Waker: it passes the Store's Wake calls to wake until ctx
// ends, and calls it once at the start for rows committed before.
func (w storeWaker) Listen(ctx context.Context, wake func()) error {
	ws := &w.s.wake
	f := &wake
	ws.mu.Lock()
	if ws.subs == nil {
		ws.subs = map[*func()]struct{}{}
	}
	ws.subs[f] = struct{}{}
	ws.mu.Unlock()
	defer func() {
		ws.mu.Lock()
		delete(ws.subs, f)
		ws.mu.Unlock()
	}()
	wake()
	<-ctx.Done()
	return nil
}
