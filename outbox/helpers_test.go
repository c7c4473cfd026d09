package outbox_test

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var (
	t0     = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	orders = transport.Destination{Broker: "kafka", Name: "orders"}
	emails = transport.Destination{Broker: "kafka", Name: "emails"}
)

// publishCall is one call the fake publisher saw.
type publishCall struct {
	Dest transport.Destination
	Msgs []transport.Message
}

// outageOnError classifies every error as an outage of the broker.
func outageOnError(error) breaker.Outcome { return breaker.Failure }

// fakePublisher records its calls and answers with fn (nil: success).
type fakePublisher struct {
	mu    sync.Mutex
	calls []publishCall
	fn    func(ctx context.Context, d transport.Destination, msgs []transport.Message) error
}

func (f *fakePublisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	f.mu.Lock()
	f.calls = append(f.calls, publishCall{Dest: d, Msgs: slices.Clone(msgs)})
	fn := f.fn
	f.mu.Unlock()
	if fn == nil {
		return nil
	}
	return fn(ctx, d, msgs)
}

func (f *fakePublisher) callsTo(d transport.Destination) int {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for _, c := range f.calls {
		if c.Dest == d {
			n++
		}
	}
	return n
}

// recordingHooks keeps every RecordDispatch call.
type recordingHooks struct {
	mu    sync.Mutex
	calls []hookCall
}

type hookCall struct {
	Dest                              transport.Destination
	Published, Deferred, Failed, Dead int
}

func (h *recordingHooks) RecordDispatch(d transport.Destination, published, deferred, failed, dead int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, hookCall{d, published, deferred, failed, dead})
}

// fixture is a memory store, a registry and a processor sharing one fake clock.
type fixture struct {
	clock *fakeclock.Clock
	store *memory.Store
	reg   *registry.Registry
	inner *fakePublisher
	proc  *outbox.Processor
}

// policy opens after 3 consecutive failures for one minute.
var policy = registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}}

// newFixture builds the processor with a fixed random source of 0.5, so jitter is half
// its maximum, and the given options after the defaults used here.
func newFixture(t *testing.T, p registry.Policy, opts ...outbox.ProcessorOption) *fixture {
	t.Helper()
	f := &fixture{clock: fakeclock.New(t0), inner: &fakePublisher{}}
	f.store = memory.New(f.clock)
	reg, err := registry.New(p, registry.WithClock(f.clock))
	if err != nil {
		t.Fatal(err)
	}
	f.reg = reg
	base := []outbox.ProcessorOption{
		outbox.WithClock(f.clock),
		outbox.WithRandom(func() float64 { return 0.5 }),
		outbox.WithOwner("test-dispatcher"),
		outbox.WithDeferralJitter(10 * time.Second),
		outbox.WithBackoff(outbox.Backoff{Initial: time.Second, Max: time.Minute, Multiplier: 2, Jitter: 0.2}),
	}
	f.proc, err = outbox.NewProcessor(f.store, reg, reg.Guard(f.inner, nil), append(base, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

// enqueue adds n rows for d with values "<name>-<i>" and returns their ids.
func (f *fixture) enqueue(t *testing.T, d transport.Destination, n int) []int64 {
	t.Helper()
	entries := make([]outbox.Entry, n)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{
			Key: []byte("k"), Value: []byte(d.Name + "-" + string(rune('a'+i%26))),
		}}
	}
	ids, err := f.store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func (f *fixture) process(t *testing.T) outbox.Report {
	t.Helper()
	rep, err := f.proc.ProcessPending(context.Background())
	if err != nil {
		t.Fatalf("ProcessPending: %v", err)
	}
	return rep
}

func (f *fixture) get(t *testing.T, id int64) outbox.Record {
	t.Helper()
	r, ok := f.store.Get(id)
	if !ok {
		t.Fatalf("row %d not found", id)
	}
	return r
}

// forceOpen holds d's circuit open until until.
func (f *fixture) forceOpen(t *testing.T, d transport.Destination, until time.Time) {
	t.Helper()
	c, err := f.reg.Circuit(d)
	if err != nil {
		t.Fatal(err)
	}
	c.(*breaker.Breaker).ForceOpen(until)
}
