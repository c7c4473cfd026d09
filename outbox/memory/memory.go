// Package memory is an outbox store that keeps its rows in this process, for tests
// and demos: the same rules as the PostgreSQL store (it passes outbox/storetest), with
// retention, dead rows, the on-call reads, wake-ups and sessions.
package memory

import (
	"cmp"
	"context"
	"fmt"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/transport"
)

// Store is an outbox.Store that keeps rows in this process, for tests and demos. It
// follows the same rules as the PostgreSQL store. Its zero value is not usable; call
// New.
type Store struct {
	clock breaker.Clock

	mu         sync.Mutex       // guards the fields below
	rows       []*outbox.Record // by id - 1
	settled    int              // rows[:settled] are all published or dead: claims scan from there
	holds      map[transport.Destination]*memoryHold
	rowWrites  int64          // row changes made by claims and write-backs (not by Enqueue)
	holdWrites int64          // holds created, changed or dropped
	enqueued   chan struct{}  // closed by the next Enqueue, for Listen
	sessions   map[string]int // open sessions by prefix: how many
}

type memoryHold struct {
	until, since time.Time
	probeToken   string
	reason       string // outbox.Hold.Reason of the last Hold
}

var (
	_ outbox.Store       = (*Store)(nil)
	_ outbox.Purger      = (*Store)(nil)
	_ outbox.DeadLetters = (*Store)(nil)
	_ outbox.Waker       = (*Store)(nil)
	_ outbox.Sessions    = (*Store)(nil)
)

// New returns an empty store whose Enqueue stamps rows with clock's time
// (nil means time.Now).
func New(clock breaker.Clock) *Store {
	return &Store{clock: clock, holds: map[transport.Destination]*memoryHold{}}
}

// HeldUntil returns when the hold of d ends, and whether d is held at all.
func (s *Store) HeldUntil(d transport.Destination) (time.Time, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.holds[d]; h != nil {
		return h.until, true
	}
	return time.Time{}, false
}

// Writes returns how many row changes claims and write-backs have made (rows leased,
// published, deferred, failed, made dead or released; Enqueue's inserts are not
// counted) and how many writes holds took (created, changed or dropped): the figures
// a PostgreSQL store would write as row updates.
func (s *Store) Writes() (rows, holds int64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.rowWrites, s.holdWrites
}

// Enqueue adds pending rows, visible at once, and returns their ids. Every entry
// must be valid (storekit.ValidateEntry); otherwise nothing is added.
func (s *Store) Enqueue(ctx context.Context, entries ...outbox.Entry) ([]int64, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	for i, e := range entries {
		if err := storekit.ValidateEntry(e, 0); err != nil {
			return nil, fmt.Errorf("outbox: enqueue entry %d: %w", i, err)
		}
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]int64, len(entries))
	for i, e := range entries {
		id := int64(len(s.rows) + 1)
		s.rows = append(s.rows, &outbox.Record{
			ID: id, Destination: e.Destination, Message: cloneMessage(e.Message),
			CreatedAt: now, VisibleAfter: now, Status: outbox.StatusPending,
		})
		out[i] = id
	}
	if s.enqueued != nil {
		close(s.enqueued)
		s.enqueued = nil
	}
	return out, nil
}

// Listen implements outbox.Waker, as the PostgreSQL Listener does for its table: it calls
// wake once when it starts and after every Enqueue, until ctx ends.
func (s *Store) Listen(ctx context.Context, wake func()) error {
	for {
		s.mu.Lock()
		if s.enqueued == nil {
			s.enqueued = make(chan struct{})
		}
		next := s.enqueued
		s.mu.Unlock()
		wake()
		select {
		case <-ctx.Done():
			return nil
		case <-next:
		}
	}
}

// shareKeys returns the claimable rows rows (in id order) that a claim of limit rows
// may take when relays relays hold a session. When a key comes back among the first
// limit rows, keys are fewer than a batch and one claim would take every key: it
// takes instead the rows of its share of the keys, the first ceil(keys / relays) by
// their first row among the first limit*relays rows, and every unkeyed row, so that
// the other relays' claims find the rest of the keys free.
func shareKeys(rows []*outbox.Record, limit, relays int) []*outbox.Record {
	if relays <= 1 || limit <= 0 {
		return rows
	}
	type destKey struct {
		d   transport.Destination
		key string
	}
	keyOf := func(r *outbox.Record) destKey { return destKey{r.Destination, string(r.Message.Key)} }
	seen := map[destKey]bool{}
	repeats := false
	for _, r := range rows[:min(len(rows), limit)] {
		if r.Message.Key != nil {
			repeats = repeats || seen[keyOf(r)]
			seen[keyOf(r)] = true
		}
	}
	if !repeats {
		return rows
	}
	wide := rows[:min(len(rows), limit*relays)]
	var order []destKey // keys by their first row
	rank := map[destKey]int{}
	for _, r := range wide {
		if k := keyOf(r); r.Message.Key != nil && rank[k] == 0 {
			order = append(order, k)
			rank[k] = len(order)
		}
	}
	share := (len(order) + relays - 1) / relays
	var out []*outbox.Record
	for _, r := range wide {
		if r.Message.Key == nil || rank[keyOf(r)] <= share {
			out = append(out, r)
		}
	}
	return out
}

// Session implements outbox.Sessions: when the session ends (end called or ctx ended), the
// rows the claims of prefix still lease are given back at once, as the PostgreSQL
// store gives them back at the next claim once their relay's connection is gone.
func (s *Store) Session(ctx context.Context, prefix string) (end func(), err error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	if s.sessions == nil {
		s.sessions = map[string]int{}
	}
	s.sessions[prefix]++
	s.mu.Unlock()
	var once sync.Once
	finish := func() { once.Do(func() { s.endSession(prefix) }) }
	stop := context.AfterFunc(ctx, finish)
	return func() { stop(); finish() }, nil
}

// endSession gives back the rows prefix's claims lease once its last session ends.
func (s *Store) endSession(prefix string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.sessions[prefix]--; s.sessions[prefix] > 0 {
		return
	}
	delete(s.sessions, prefix)
	for _, r := range s.rows[s.settled:] {
		if isPending(r) && hasPrefix(r.LeaseOwner, prefix) {
			s.release(r)
		}
	}
}

// Get returns a copy of row id.
func (s *Store) Get(id int64) (outbox.Record, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	r := s.row(id)
	if r == nil {
		return outbox.Record{}, false
	}
	return copyRecord(r), true
}

func (s *Store) now() time.Time {
	if s.clock != nil {
		return s.clock.Now()
	}
	return time.Now()
}

// row returns row id, nil when there is none (never was, or deleted); it requires
// s.mu held.
func (s *Store) row(id int64) *outbox.Record {
	if id < 1 || id > int64(len(s.rows)) {
		return nil
	}
	return s.rows[id-1]
}

// isPending reports whether r is a row, not deleted, and pending.
func isPending(r *outbox.Record) bool { return r != nil && r.Status == outbox.StatusPending }

// Records returns a copy of every row, by id.
func (s *Store) Records() []outbox.Record {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]outbox.Record, 0, len(s.rows))
	for _, r := range s.rows {
		if r != nil {
			out = append(out, copyRecord(r))
		}
	}
	return out
}

// Claim implements outbox.Store. Claims are serialized by the store's lock, so rows of one
// destination and key are always claimed in enqueue order.
func (s *Store) Claim(ctx context.Context, r outbox.ClaimRequest) ([]outbox.Record, error) {
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.settled < len(s.rows) && !isPending(s.rows[s.settled]) {
		s.settled++
	}
	// A hold that has ended is dropped if its destination has no pending row (one
	// that has not ended lasts, as in the PostgreSQL store), else it gets up to
	// ProbeLimit rows claimed as its probe.
	probes := map[transport.Destination]int{}
	pendingDests := map[transport.Destination]bool{}
	for _, row := range s.rows[s.settled:] {
		if isPending(row) {
			pendingDests[row.Destination] = true
		}
	}
	for d, h := range s.holds {
		switch {
		case h.until.After(r.Now):
		case !pendingDests[d]:
			delete(s.holds, d)
			s.holdWrites++
		default:
			probes[d] = max(r.ProbeLimit, 1)
		}
	}
	// Probes first, as many as the limit allows, then the rows of destinations that
	// are not held, lowest ids first (the PostgreSQL store's two statements).
	var probeRows, rows []*outbox.Record
	blocked := map[string]bool{} // destination and key of a pending row not claimable now
	for _, row := range s.rows[s.settled:] {
		if !isPending(row) {
			continue
		}
		key := ""
		if row.Message.Key != nil {
			key = row.Destination.String() + "\x00" + string(row.Message.Key)
		}
		if row.VisibleAfter.After(r.Now) || row.LeaseUntil.After(r.Now) || blocked[key] {
			if key != "" {
				blocked[key] = true
			}
			continue
		}
		if _, held := s.holds[row.Destination]; !held {
			rows = append(rows, row)
		} else if probes[row.Destination] > 0 {
			probes[row.Destination]--
			probeRows = append(probeRows, row)
		}
	}
	probeRows = probeRows[:min(len(probeRows), r.Limit)]
	probed := map[transport.Destination]bool{}
	for _, row := range probeRows {
		probed[row.Destination] = true
	}
	rows = shareKeys(rows, r.Limit-len(probeRows), max(len(s.sessions), 1))
	rows = rows[:max(min(len(rows), r.Limit-len(probeRows)), 0)]
	if r.MaxBytes > 0 { // a prefix of them, by id, within the bytes (at least one row)
		total := 0
		for i, row := range rows {
			if total += storekit.MessageSize(row.Message); total > r.MaxBytes && i > 0 {
				rows = rows[:i]
				break
			}
		}
	}
	due := append(probeRows, rows...)
	slices.SortFunc(due, func(a, b *outbox.Record) int { return cmp.Compare(a.ID, b.ID) })
	out := make([]outbox.Record, len(due))
	for i, row := range due {
		row.LeaseOwner, row.LeaseUntil = r.Token, r.Now.Add(r.Lease)
		out[i] = copyRecord(row)
		out[i].Probe = probed[row.Destination]
	}
	s.rowWrites += int64(len(due))
	for d := range probed {
		h := s.holds[d]
		h.until, h.probeToken = r.Now.Add(r.Lease), r.Token
		s.holdWrites++
	}
	return out, nil
}

// held returns row id when token leases it and it is pending; it requires s.mu held.
func (s *Store) held(token string, id int64) *outbox.Record {
	r := s.row(id)
	if !isPending(r) || r.LeaseOwner != token {
		return nil
	}
	return r
}

// release gives r's lease back and counts the row's write; it requires s.mu held.
func (s *Store) release(r *outbox.Record) {
	r.LeaseOwner, r.LeaseUntil = "", time.Time{}
	s.rowWrites++
}

// MarkPublished implements outbox.Store.
func (s *Store) MarkPublished(ctx context.Context, token string, now time.Time, ids []int64) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range ids {
		if r := s.held(token, id); r != nil {
			r.Status, r.SettledAt = outbox.StatusPublished, now
			s.release(r)
			n++
		}
	}
	return n, nil
}

// Defer implements outbox.Store.
func (s *Store) Defer(ctx context.Context, d outbox.Deferral) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	n := 0
	for _, id := range d.IDs {
		r := s.held(d.Token, id)
		if r == nil {
			continue
		}
		if r.FirstDeferredAt.IsZero() {
			r.FirstDeferredAt = d.Now
		}
		r.Deferrals++
		s.release(r)
		n++
	}
	return n, nil
}

// Hold implements outbox.Store.
func (s *Store) Hold(ctx context.Context, h outbox.Hold) (int, error) {
	if err := ctx.Err(); err != nil {
		return 0, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	cur := s.holds[h.Destination]
	switch {
	case cur == nil:
		cur = &memoryHold{until: h.Until, since: h.Now}
		s.holds[h.Destination] = cur
	case cur.probeToken == h.Token:
		cur.until, cur.probeToken = h.Until, ""
	case h.Until.After(cur.until):
		cur.until = h.Until
	}
	cur.reason = h.Reason
	s.holdWrites++
	if h.Now.Sub(cur.since) <= h.MaxDeferral {
		return 0, nil
	}
	dead := 0
	for _, r := range s.rows[s.settled:] {
		if !isPending(r) || r.Destination != h.Destination ||
			(r.LeaseUntil.After(h.Now) && r.LeaseOwner != h.Token) ||
			h.Now.Sub(later(r.CreatedAt, cur.since)) <= h.MaxDeferral {
			continue
		}
		r.Status, r.LastError, r.SettledAt = outbox.StatusDead, outbox.ReasonDeferralExhausted, h.Now
		s.release(r)
		dead++
	}
	return dead, nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// Unhold implements outbox.Store.
func (s *Store) Unhold(ctx context.Context, d transport.Destination, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h := s.holds[d]; h != nil && h.probeToken == token {
		delete(s.holds, d)
		s.holdWrites++
	}
	return nil
}

// Fail implements outbox.Store.
func (s *Store) Fail(ctx context.Context, token string, failures []outbox.Failure) (failed, dead int, err error) {
	if err := ctx.Err(); err != nil {
		return 0, 0, err
	}
	now := s.now()
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, f := range failures {
		r := s.held(token, f.ID)
		if r == nil {
			continue
		}
		r.Attempts++
		r.VisibleAfter, r.LastError = f.RetryAt, f.Err
		if f.Dead {
			r.Status, r.SettledAt = outbox.StatusDead, now
			dead++
		} else {
			failed++
		}
		s.release(r)
	}
	return failed, dead, nil
}

// Release implements outbox.Store.
func (s *Store) Release(ctx context.Context, token string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.rows[s.settled:] {
		if isPending(r) && r.LeaseOwner == token {
			s.release(r)
		}
	}
	return nil
}

// Backlog implements outbox.Store; the age is measured on the store's clock.
func (s *Store) Backlog(ctx context.Context) (pending int64, oldest time.Duration, err error) {
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

func copyRecord(r *outbox.Record) outbox.Record {
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

// hasPrefix reports whether a claim token starts with a session's prefix.
func hasPrefix(token, prefix string) bool { return prefix != "" && strings.HasPrefix(token, prefix) }
