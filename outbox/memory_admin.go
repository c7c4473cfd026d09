package outbox

import (
	"cmp"
	"context"
	"slices"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// DeleteSettled implements Purger: the oldest settled rows first (ties by id), as the
// PostgreSQL store does.
func (s *MemoryStore) DeleteSettled(ctx context.Context, publishedBefore, deadBefore time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := CheckDeleteLimit(limit); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	deleted := 0
	for _, st := range []struct {
		status Status
		before time.Time
	}{{StatusPublished, publishedBefore}, {StatusDead, deadBefore}} {
		if st.before.IsZero() {
			continue
		}
		var old []*Record
		for _, r := range s.rows {
			if r != nil && r.Status == st.status && r.SettledAt.Before(st.before) {
				old = append(old, r)
			}
		}
		slices.SortFunc(old, func(a, b *Record) int {
			return cmp.Or(a.SettledAt.Compare(b.SettledAt), cmp.Compare(a.ID, b.ID))
		})
		for _, r := range old[:min(limit, len(old))] {
			s.rows[r.ID-1] = nil
			deleted++
		}
	}
	return deleted, nil
}

// matchDead reports whether r is a dead row f picks.
func matchDead(r *Record, f DeadFilter) bool {
	return r != nil && r.Status == StatusDead &&
		(len(f.IDs) == 0 || slices.Contains(f.IDs, r.ID)) &&
		(f.Destination == (transport.Destination{}) || r.Destination == f.Destination) &&
		f.MatchesReason(r.LastError)
}

// DeadRows implements DeadLetters.
func (s *MemoryStore) DeadRows(ctx context.Context, f DeadFilter, p Page) ([]Record, error) {
	var out []Record
	err := s.eachDead(ctx, f, p, func(r *Record) { out = append(out, copyRecord(r)) })
	return out, err
}

// DeadSummaries implements DeadSummaries: the page DeadRows returns, without copying
// the payloads.
func (s *MemoryStore) DeadSummaries(ctx context.Context, f DeadFilter, p Page) ([]DeadSummary, error) {
	var out []DeadSummary
	err := s.eachDead(ctx, f, p, func(r *Record) {
		bare := *r
		bare.Message.Value = nil
		out = append(out, DeadSummary{Record: copyRecord(&bare), ValueBytes: len(r.Message.Value)})
	})
	return out, err
}

// eachDead checks f and p, then calls yield, under the lock, with each dead row of the
// page p that f matches, by id.
func (s *MemoryStore) eachDead(ctx context.Context, f DeadFilter, p Page, yield func(*Record)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := f.Validate(); err != nil {
		return err
	}
	if err := p.Validate(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rows[min(max(p.After, 0), int64(len(s.rows))):] {
		if n == p.Size() {
			return nil
		}
		if matchDead(r, f) {
			yield(r)
			n++
		}
	}
	return nil
}

// Requeue implements DeadLetters.
func (s *MemoryStore) Requeue(ctx context.Context, f DeadFilter, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := CheckRequeue(f); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, r := range s.rows {
		if !matchDead(r, f) {
			continue
		}
		r.Status, r.VisibleAfter, r.SettledAt = StatusPending, now, time.Time{}
		r.Attempts, r.Deferrals, r.FirstDeferredAt = 0, 0, time.Time{}
		s.release(r)
		s.settled = min(s.settled, i)
		n++
	}
	return n, nil
}
