package outbox

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// MemoryStore is a Store that keeps rows in this process, for tests and demos. It
// follows the same rules as the PostgreSQL store. Its zero value is not usable; call
// NewMemoryStore.
type MemoryStore struct {
	clock breaker.Clock

	mu      sync.Mutex // guards the fields below
	rows    []*Record  // by id - 1
	settled int        // rows[:settled] are all published or dead: claims scan from there
}

var (
	_ Store       = (*MemoryStore)(nil)
	_ Purger      = (*MemoryStore)(nil)
	_ DeadLetters = (*MemoryStore)(nil)
)

// NewMemoryStore returns an empty store whose Enqueue stamps rows with clock's time
// (nil means time.Now).
func NewMemoryStore(clock breaker.Clock) *MemoryStore {
	return &MemoryStore{clock: clock}
}

// Enqueue adds pending rows, visible at once, and returns their ids. Every
// destination must be valid; otherwise nothing is added.
func (s *MemoryStore) Enqueue(ctx context.Context, entries ...Entry) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for _, e := range entries {
		if err := e.Destination.Validate(); err != nil {
			return nil, fmt.Errorf("outbox: enqueue: %w", err)
		}
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int64, len(entries))
	for i, e := range entries {
		id := int64(len(s.rows) + 1)
		s.rows = append(s.rows, &Record{
			ID: id, Destination: e.Destination, Message: cloneMessage(e.Message),
			CreatedAt: now, VisibleAfter: now, Status: StatusPending,
		})
		out[i] = id
	}
	return out, nil
}

func (s *MemoryStore) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// Get returns a copy of row id.
func (s *MemoryStore) Get(id int64) (Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.row(id)
	if r == nil {
		return Record{}, false
	}
	return copyRecord(r), true
}

// row returns row id, nil when there is none (never was, or deleted); it requires
// s.mu held.
func (s *MemoryStore) row(id int64) *Record {
	if id < 1 || id > int64(len(s.rows)) {
		return nil
	}
	return s.rows[id-1]
}

// Records returns a copy of every row, by id.
func (s *MemoryStore) Records() []Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Record, 0, len(s.rows))
	for _, r := range s.rows {
		if r != nil {
			out = append(out, copyRecord(r))
		}
	}
	return out
}

// Claim implements Store.
func (s *MemoryStore) Claim(ctx context.Context, owner string, now time.Time, limit int, lease time.Duration) ([]Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.settled < len(s.rows) && !isPending(s.rows[s.settled]) {
		s.settled++
	}
	var due []*Record
	for _, r := range s.rows[s.settled:] {
		if isPending(r) && !r.VisibleAfter.After(now) && !r.LeaseUntil.After(now) {
			due = append(due, r)
		}
	}
	slices.SortStableFunc(due, func(a, b *Record) int { return a.VisibleAfter.Compare(b.VisibleAfter) })
	if len(due) > limit {
		due = due[:limit]
	}
	slices.SortFunc(due, func(a, b *Record) int { return cmp.Compare(a.ID, b.ID) })
	out := make([]Record, len(due))
	for i, r := range due {
		r.LeaseOwner, r.LeaseUntil = owner, now.Add(lease)
		out[i] = copyRecord(r)
	}
	return out, nil
}

// held returns row id when owner leases it and it is pending; it requires s.mu held.
func (s *MemoryStore) held(owner string, id int64) *Record {
	r := s.row(id)
	if !isPending(r) || r.LeaseOwner != owner {
		return nil
	}
	return r
}

// isPending reports whether r is a row, not deleted, and pending.
func isPending(r *Record) bool { return r != nil && r.Status == StatusPending }

func release(r *Record) { r.LeaseOwner, r.LeaseUntil = "", time.Time{} }

// MarkPublished implements Store.
func (s *MemoryStore) MarkPublished(ctx context.Context, owner string, now time.Time, ids []int64) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range ids {
		if r := s.held(owner, id); r != nil {
			r.Status, r.SettledAt = StatusPublished, now
			release(r)
		}
	}
	return nil
}

// Defer implements Store.
func (s *MemoryStore) Defer(ctx context.Context, d Deferral) (deferred, dead int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, id := range d.IDs {
		r := s.held(d.Owner, id)
		if r == nil {
			continue
		}
		first := r.FirstDeferredAt
		if first.IsZero() {
			first = d.Now
		}
		if d.Now.Sub(first) > d.MaxDeferral {
			r.Status, r.LastError, r.SettledAt = StatusDead, ReasonDeferralExhausted, d.Now
			dead++
		} else {
			if d.NotBefore.After(r.VisibleAfter) {
				r.VisibleAfter = d.NotBefore
			}
			r.VisibleAfter = r.VisibleAfter.Add(d.Jitter)
			r.Deferrals++
			r.FirstDeferredAt = first
			deferred++
		}
		release(r)
	}
	return deferred, dead, nil
}

// Fail implements Store.
func (s *MemoryStore) Fail(ctx context.Context, owner string, failures []Failure) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range failures {
		r := s.held(owner, f.ID)
		if r == nil {
			continue
		}
		r.Attempts++
		r.VisibleAfter, r.LastError = f.RetryAt, f.Err
		if f.Dead {
			r.Status, r.SettledAt = StatusDead, now
		}
		release(r)
	}
	return nil
}

// Release implements Store.
func (s *MemoryStore) Release(ctx context.Context, owner string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows[s.settled:] {
		if isPending(r) && r.LeaseOwner == owner {
			release(r)
		}
	}
	return nil
}

// Backlog implements Store; the age is measured on the store's clock.
func (s *MemoryStore) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	var first time.Time
	for _, r := range s.rows[s.settled:] {
		if isPending(r) {
			if pending == 0 || r.CreatedAt.Before(first) {
				first = r.CreatedAt
			}
			pending++
		}
	}
	if pending > 0 {
		oldest = max(now.Sub(first), 0)
	}
	return pending, oldest, nil
}

func copyRecord(r *Record) Record {
	c := *r
	c.Message = cloneMessage(r.Message)
	return c
}

func cloneMessage(m transport.Message) transport.Message {
	m.Key = slices.Clone(m.Key)
	m.Value = slices.Clone(m.Value)
	m.Headers = slices.Clone(m.Headers)
	for i := range m.Headers {
		m.Headers[i].Value = slices.Clone(m.Headers[i].Value)
	}
	return m
}
