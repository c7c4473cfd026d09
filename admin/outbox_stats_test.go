package admin_test

import (
	"context"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/brokerguard/brokerguard/admin"
)

// slowBacklog is an outbox whose reads wait for release (nil: answer at once) and
// are counted.
type slowBacklog struct {
	reads   atomic.Int64
	entered chan struct{}
	release chan struct{}
}

func (b *slowBacklog) Backlog(ctx context.Context) (int64, time.Duration, error) {
	n := b.reads.Add(1)
	if b.release != nil {
		b.entered <- struct{}{}
		<-b.release
	}
	return n, time.Second, nil
}

// GET /api/outbox reads the store at most once a second and one read at a time:
// requests within the second get the last result; a request while a read is under
// way waits for it before there is a result.
func TestOutboxStatsAreReadOnceAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		store := &slowBacklog{entered: make(chan struct{}), release: make(chan struct{})}
		f := newFixture(t, admin.WithOutbox(store))
		get := func() float64 {
			_, body := f.do(t, req{method: "GET", path: "/api/outbox"})
			return body["pending"].(float64)
		}
		// Two dashboards open at once: one read, both answered with it.
		var wg sync.WaitGroup
		got := make([]float64, 2)
		wg.Go(func() { got[0] = get() })
		<-store.entered
		wg.Go(func() { got[1] = get() })
		synctest.Wait() // the second request waits for the first one's read
		close(store.release)
		store.release = nil
		wg.Wait()
		if store.reads.Load() != 1 || got[0] != 1 || got[1] != 1 {
			t.Fatalf("two requests at once: %d reads, answers %v; want one read for both", store.reads.Load(), got)
		}
		for range 5 {
			if n := get(); n != 1 {
				t.Fatalf("a request within the second answered %v; want the last read's 1", n)
			}
		}
		f.clock.Advance(time.Second)
		if n := get(); n != 2 || store.reads.Load() != 2 {
			t.Fatalf("a request a second later answered %v after %d reads; want a new read", n, store.reads.Load())
		}
	})
}
