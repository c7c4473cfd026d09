package dynamo

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// memStore is the in-memory table of the unit tests. It keeps items encoded, as the
// table does, so every read goes through decodeItem and a test can corrupt an item.
// It follows the conditions tableStore asks DynamoDB to check.
type memStore struct {
	mu    sync.Mutex
	items map[string]map[string]types.AttributeValue
	down  error          // when set, every request fails with it
	hang  bool           // when set, every request waits for its context to end
	calls map[string]int // requests by method, successful or not
	// afterRead, when set, runs once in the next load after the item was read and
	// before it is returned (without the store's lock), so a test can change the
	// table under a read in flight.
	afterRead func()
	// lostAnswer, when set, runs once after the next Replace has written, and the
	// Replace fails with its error: a request whose answer never arrives.
	lostAnswer func() error
	// afterUpdate, when set, runs once after the next counter update has written and
	// before it answers (without the store's lock), so a test can slip another
	// replica's request in between.
	afterUpdate func()
	// onRequest, when set, runs at the start of every request (under the lock).
	onRequest func(method string)
	// refuse, when set, fails every write (not a load), as a throttled table.
	refuse error
}

var errDown = errors.New("memstore: table unreachable")

func newMemStore() *memStore {
	return &memStore{items: map[string]map[string]types.AttributeValue{}, calls: map[string]int{}}
}

func (m *memStore) setDown(err error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.down = err
}

// count returns the requests made so far for the methods named (all when none).
func (m *memStore) count(methods ...string) int {
	m.mu.Lock()
	defer m.mu.Unlock()
	n := 0
	for k, v := range m.calls {
		if len(methods) == 0 {
			n += v
		}
		for _, want := range methods {
			if k == want {
				n += v
			}
		}
	}
	return n
}

// raw replaces the stored attributes of id (nil deletes the item).
func (m *memStore) raw(id string, attrs map[string]types.AttributeValue) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if attrs == nil {
		delete(m.items, id)
		return
	}
	m.items[id] = maps.Clone(attrs)
}

// get decodes the stored item of id, for assertions.
func (m *memStore) get(id string) (sharedstate.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	attrs, ok := m.items[id]
	if !ok {
		return sharedstate.Record{}, sharedstate.ErrNotFound
	}
	return decodeItem(id, attrs)
}

// setHang makes every request wait until its context ends, as with a table that
// does not answer.
func (m *memStore) setHang(hang bool) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.hang = hang
}

// begin counts a request and returns the error it fails with. Requires m.mu held; a
// hanging store releases it while the request waits.
func (m *memStore) begin(ctx context.Context, method string) error {
	m.calls[method]++
	if m.onRequest != nil {
		m.onRequest(method)
	}
	if m.hang {
		m.mu.Unlock()
		<-ctx.Done()
		m.mu.Lock()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	if m.refuse != nil && method != "load" && m.down == nil {
		return m.refuse
	}
	return m.down
}

func (m *memStore) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	m.mu.Lock()
	if err := m.begin(ctx, "load"); err != nil {
		m.mu.Unlock()
		return sharedstate.Record{}, err
	}
	attrs, ok := m.items[id]
	hook := m.afterRead
	m.afterRead = nil
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	if !ok {
		return sharedstate.Record{}, sharedstate.ErrNotFound
	}
	return decodeItem(id, attrs)
}

func (m *memStore) Replace(ctx context.Context, id string, expected uint64, r sharedstate.Record) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx, "put"); err != nil {
		return err
	}
	cur, ok := m.items[id]
	switch {
	case expected == 0 && ok:
		return sharedstate.ErrConflict
	case expected != 0 && (!ok || !numIs(cur[attrVersion], int64(expected))):
		return sharedstate.ErrConflict
	}
	m.items[id] = encode(id, r)
	if lost := m.lostAnswer; lost != nil {
		m.lostAnswer = nil
		return lost() // written, but the caller never hears so
	}
	return nil
}

func numIs(v types.AttributeValue, want int64) bool {
	n, ok := v.(*types.AttributeValueMemberN)
	return ok && n.Value == num(want).(*types.AttributeValueMemberN).Value
}

func (m *memStore) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return m.update(ctx, "addFailure", id, c, func(r *sharedstate.Record) bool {
		r.Failures++
		return true
	})
}

func (m *memStore) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return m.update(ctx, "resetFailures", id, c, func(r *sharedstate.Record) bool {
		if r.Failures == 0 {
			return false
		}
		r.Failures = 0
		return true
	})
}

func (m *memStore) update(ctx context.Context, method, id string, c sharedstate.Closed, f func(*sharedstate.Record) bool) (sharedstate.Record, error) {
	r, err := m.updateLocked(ctx, method, id, c, f)
	m.mu.Lock()
	hook := m.afterUpdate
	if err == nil {
		m.afterUpdate = nil
	}
	m.mu.Unlock()
	if hook != nil && err == nil {
		hook()
	}
	return r, err
}

func (m *memStore) updateLocked(ctx context.Context, method, id string, c sharedstate.Closed, f func(*sharedstate.Record) bool) (sharedstate.Record, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx, method); err != nil {
		return sharedstate.Record{}, err
	}
	attrs, ok := m.items[id]
	if !ok {
		return sharedstate.Record{}, sharedstate.ErrConflict
	}
	r, err := decodeItem(id, attrs)
	if err != nil {
		return sharedstate.Record{}, err
	}
	if !c.Matches(r) || r.Failures >= c.Limit || !f(&r) {
		return sharedstate.Record{}, sharedstate.ErrConflict
	}
	r.Version++
	m.items[id] = encode(id, r)
	return r, nil
}
