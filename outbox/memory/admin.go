package memory

import (
	"cmp"
	"context"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"slices"
	"time"

	"github.com/brokerguard/brokerguard/transport"
)

// DeleteSettled implements outbox.Purger: the oldest settled rows first (ties by id), as the
// PostgreSQL store does.
func (s *Store) DeleteSettled(ctx context.Context, publishedBefore, deadBefore time.Time, limit int) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := storekit.CheckDeleteLimit(limit); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	deleted := 0
	for _, st := range []struct {
		status outbox.Status
		before time.Time
	}{{outbox.StatusPublished, publishedBefore}, {outbox.StatusDead, deadBefore}} {
		if st.before.IsZero() {
			continue
		}
		var old []*outbox.Record
		for _, r := range s.rows {
			if r != nil && r.Status == st.status && r.SettledAt.Before(st.before) {
				old = append(old, r)
			}
		}
		slices.SortFunc(old, func(a, b *outbox.Record) int {
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
func matchDead(r *outbox.Record, f outbox.DeadFilter) bool {
	return r != nil && r.Status == outbox.StatusDead &&
		(len(f.IDs) == 0 || slices.Contains(f.IDs, r.ID)) &&
		(f.Destination == (transport.Destination{}) || r.Destination == f.Destination) &&
		storekit.MatchesReason(f, r.LastError)
}

// DeadRows implements outbox.DeadLetters.
func (s *Store) DeadRows(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.Record, error) {
	var out []outbox.Record
	err := s.eachDead(ctx, f, p, func(r *outbox.Record) { out = append(out, copyRecord(r)) })
	return out, err
}

// DeadSummaries implements DeadSummaries: the page DeadRows returns, without copying
// the payloads.
func (s *Store) DeadSummaries(ctx context.Context, f outbox.DeadFilter, p outbox.Page) ([]outbox.DeadSummary, error) {
	var out []outbox.DeadSummary
	err := s.eachDead(ctx, f, p, func(r *outbox.Record) {
		bare := *r
		bare.Message.Value = nil
		out = append(out, outbox.DeadSummary{Record: copyRecord(&bare), ValueBytes: len(r.Message.Value)})
	})
	return out, err
}

// eachDead checks f and p, then calls yield, under the lock, with each dead row of the
// page p that f matches, by id.
func (s *Store) eachDead(ctx context.Context, f outbox.DeadFilter, p outbox.Page, yield func(*outbox.Record)) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if err := storekit.CheckDeadPage(f, p); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, r := range s.rows[min(max(p.After, 0), int64(len(s.rows))):] {
		if n == storekit.PageSize(p) {
			return nil
		}
		if matchDead(r, f) {
			yield(r)
			n++
		}
	}
	return nil
}

// Requeue implements outbox.DeadLetters.
func (s *Store) Requeue(ctx context.Context, f outbox.DeadFilter, now time.Time) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	if err := storekit.CheckRequeue(f); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for i, r := range s.rows {
		if !matchDead(r, f) {
			continue
		}
		r.Status, r.VisibleAfter, r.SettledAt = outbox.StatusPending, now, time.Time{}
		r.Attempts, r.Deferrals, r.FirstDeferredAt = 0, 0, time.Time{}
		s.release(r)
		s.settled = min(s.settled, i)
		n++
	}
	return n, nil
}
