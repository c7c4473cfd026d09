package dynamo

import (
	"context"
	"errors"
	"maps"
	"sync"

	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
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
func (m *memStore) get(id string) (item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	attrs, ok := m.items[id]
	if !ok {
		return item{}, errNotFound
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
	if m.hang {
		m.mu.Unlock()
		<-ctx.Done()
		m.mu.Lock()
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	return m.down
}

func (m *memStore) load(ctx context.Context, id string) (item, error) {
	m.mu.Lock()
	if err := m.begin(ctx, "load"); err != nil {
		m.mu.Unlock()
		return item{}, err
	}
	attrs, ok := m.items[id]
	hook := m.afterRead
	m.afterRead = nil
	m.mu.Unlock()
	if hook != nil {
		hook()
	}
	if !ok {
		return item{}, errNotFound
	}
	return decodeItem(id, attrs)
}

func (m *memStore) put(ctx context.Context, it item, expected uint64) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx, "put"); err != nil {
		return err
	}
	cur, ok := m.items[it.id]
	switch {
	case expected == 0 && ok:
		return errConflict
	case expected != 0 && (!ok || !numIs(cur[attrVersion], int64(expected))):
		return errConflict
	}
	m.items[it.id] = it.encode()
	return nil
}

func numIs(v types.AttributeValue, want int64) bool {
	n, ok := v.(*types.AttributeValueMemberN)
	return ok && n.Value == num(want).(*types.AttributeValueMemberN).Value
}

func (m *memStore) addFailure(ctx context.Context, id, fingerprint string, gen uint64) (item, error) {
	return m.update(ctx, "addFailure", id, fingerprint, gen, func(it *item) bool {
		it.failures++
		return true
	})
}

func (m *memStore) resetFailures(ctx context.Context, id, fingerprint string, gen uint64) (item, error) {
	return m.update(ctx, "resetFailures", id, fingerprint, gen, func(it *item) bool {
		if it.failures == 0 {
			return false
		}
		it.failures = 0
		return true
	})
}

func (m *memStore) update(ctx context.Context, method, id, fingerprint string, gen uint64, f func(*item) bool) (item, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := m.begin(ctx, method); err != nil {
		return item{}, err
	}
	attrs, ok := m.items[id]
	if !ok {
		return item{}, errConflict
	}
	it, err := decodeItem(id, attrs)
	if err != nil {
		return item{}, err
	}
	if it.gen != gen || it.state != breaker.Closed || it.fingerprint != fingerprint || !f(&it) {
		return item{}, errConflict
	}
	it.version++
	m.items[id] = it.encode()
	return it, nil
}
