package amqp_test

import (
	"context"
	"encoding/json"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	amqp091 "github.com/rabbitmq/amqp091-go"

	bgadmin "github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// unusableOutage runs the outbox against the real broker, on a vhost and user of its
// own, while the destination is unusable for ten minutes of the outbox's fake clock
// (breakIt makes it so, fixIt undoes it): no row dies or spends an attempt, the
// admin API says why the destination is held while it lasts, and afterwards every
// row is published, in order. It returns the reason the admin API showed.
func unusableOutage(t *testing.T, tenant harness.RabbitTenant, exchange, queue string, breakIt, fixIt func()) string {
	t.Helper()
	clock := fakeclock.New(time.Now())
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	m, err := amqp.NewManager(tenant.URL)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = m.Close() })
	pub, err := amqp.NewPublisher(m, reg)
	if err != nil {
		t.Fatal(err)
	}
	store := memory.New(clock)
	// No WithClassifier: the Processor takes amqp.Classify from the publisher.
	proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClock(clock), outbox.WithMaxAttempts(4),
		outbox.WithDeferralJitter(0))
	if err != nil {
		t.Fatal(err)
	}
	h, err := bgadmin.New(reg, bgadmin.WithOutbox(store), bgadmin.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)

	d := amqp.Destination(exchange)
	entries := make([]outbox.Entry, 20)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: d, Message: transport.Message{Key: []byte("k"), Value: []byte(strconv.Itoa(i))}}
	}
	ids, err := store.Enqueue(context.Background(), entries...)
	if err != nil {
		t.Fatal(err)
	}
	breakIt()
	start, reason, rounds := clock.Now(), "", 0
	for clock.Now().Sub(start) < 10*time.Minute {
		rounds++
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		until, held := store.HeldUntil(d)
		if !held {
			t.Fatalf("round %d: the unusable destination is not held", rounds)
		}
		var c bgadmin.Circuit
		getJSON(t, srv.URL+"/api/circuits/"+url.PathEscape(d.String()), &c)
		var o bgadmin.OutboxStats
		getJSON(t, srv.URL+"/api/outbox", &o)
		if c.State != "closed" || c.Unusable == "" || o.Unusable != 1 || len(o.Held) != 1 || o.Held[0].Unusable == "" {
			t.Fatalf("round %d: admin says circuit %+v, outbox %+v; want closed, unusable with a reason, held for it", rounds, c, o)
		}
		reason = c.Unusable
		clock.Set(until)
	}
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPending || r.Attempts != 0 {
			t.Fatalf("row %d after ten minutes: %s, %d attempts, %q; want pending, uncharged", id, r.Status, r.Attempts, r.LastError)
		}
	}
	t.Logf("%d dispatches in ten minutes; reason %q", rounds, reason)

	fixIt()
	for i := 0; i < 10; i++ {
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		if until, held := store.HeldUntil(d); held {
			clock.Set(until)
		}
	}
	for _, id := range ids {
		if r, _ := store.Get(id); r.Status != outbox.StatusPublished {
			t.Fatalf("row %d after the fix: %s (%q)", id, r.Status, r.LastError)
		}
	}
	ch := admin(t, tenant.URL)
	for i := range ids {
		if got := get(t, ch, queue); string(got.Body) != strconv.Itoa(i) {
			t.Fatalf("message %d is %q: out of order", i, got.Body)
		}
	}
	if s, _ := reg.Snapshot(d); s.Unusable != "" || s.State != breaker.Closed {
		t.Errorf("after the fix the snapshot says %+v", s)
	}
	return reason
}

func getJSON(t *testing.T, u string, v any) {
	t.Helper()
	resp, err := http.Get(u)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %s", u, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Fatal(err)
	}
}

// declareIn declares, as the tenant, a fanout exchange (when exchange is not "") and
// a queue bound to it.
func declareIn(t *testing.T, tenant harness.RabbitTenant, exchange, queue string) {
	t.Helper()
	ch := admin(t, tenant.URL)
	if exchange != "" {
		if err := ch.ExchangeDeclare(exchange, "fanout", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := ch.QueueDeclare(queue, false, false, false, false, nil); err != nil {
		t.Fatal(err)
	}
	if exchange != "" {
		if err := ch.QueueBind(queue, "", exchange, false, nil); err != nil {
			t.Fatal(err)
		}
	}
}

// TestUnusableRabbitDestinations runs, on one vhost and user of its own (creating
// them with rabbitmqctl takes seconds), the cases where the broker is healthy and the
// destination is not usable.
func TestUnusableRabbitDestinations(t *testing.T) {
	tenant := harness.NewRabbitTenant(t)
	t.Run("revoked permission", func(t *testing.T) { revokedPermission(t, tenant) })
	t.Run("missing exchange", func(t *testing.T) { missingExchange(t, tenant) })
	t.Run("wrong password", func(t *testing.T) { wrongPassword(t, tenant) })
}

// A write permission revoked for ten minutes (403 ACCESS_REFUSED on the exchange):
// the outbox holds the exchange, charges no row, and publishes them all in order once
// the permission is back.
func revokedPermission(t *testing.T, tenant harness.RabbitTenant) {
	x, q := "orders", "orders-q"
	declareIn(t, tenant, x, q)
	reason := unusableOutage(t, tenant, x, q,
		func() { tenant.Grant(t, ".*", "^$", ".*") }, // may configure and read, not write
		func() { tenant.Grant(t, ".*", ".*", ".*") })
	if !strings.Contains(reason, "ACCESS_REFUSED") {
		t.Errorf("reason %q does not say the access was refused", reason)
	}
}

// An exchange missing for ten minutes (404 NOT_FOUND), then declared.
func missingExchange(t *testing.T, tenant harness.RabbitTenant) {
	x, q := "late", "late-q"
	declareIn(t, tenant, "", q)
	reason := unusableOutage(t, tenant, x, q, func() {}, func() {
		ch := admin(t, tenant.URL)
		if err := ch.ExchangeDeclare(x, "fanout", false, false, false, false, nil); err != nil {
			t.Fatal(err)
		}
		if err := ch.QueueBind(q, "", x, false, nil); err != nil {
			t.Fatal(err)
		}
	})
	if !strings.Contains(reason, "does not exist") || !strings.Contains(reason, "404") {
		t.Errorf("reason %q does not say the exchange is missing", reason)
	}
}

// A wrong password: the broker refuses every login (403 at connection.open). The
// connection circuit opens after DefaultDialPolicy's three refused dials and then
// admits one dial per break (1 s, 2 s, 4 s, ... up to 30 s): at most 8 dials in
// the first minute and 2 a minute after, however often the application publishes.
// Every publish fails with an error that names the cause, Unusable to the exchange's
// circuit, which stays closed.
func wrongPassword(t *testing.T, tenant harness.RabbitTenant) {
	var dials atomic.Int64
	dial := amqp091.DefaultDial(2 * time.Second)
	m, err := amqp.NewManager(tenant.WithPassword("wrong"), amqp.WithConfig(amqp091.Config{
		Dial: func(network, addr string) (net.Conn, error) { dials.Add(1); return dial(network, addr) },
	}))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	pub, err := amqp.NewPublisher(m, reg)
	if err != nil {
		t.Fatal(err)
	}
	d := amqp.Destination("orders")
	publishes := 0
	var last error
	// At least 8 s and at least 100 publishes: a loaded machine that publishes slowly
	// runs longer rather than failing the count (the fourth probe is 15 s away).
	start := time.Now()
	for deadline := start.Add(8 * time.Second); time.Now().Before(deadline) || publishes < 100; publishes++ {
		last = pub.Publish(context.Background(), d, transport.Message{Value: []byte("x")})
		if !errors.Is(last, amqp.ErrLoginRefused) || amqp.Classify(last) != breaker.Unusable {
			t.Fatalf("publish %d: %v (%v), want a refused login, Unusable", publishes, last, amqp.Classify(last))
		}
		time.Sleep(5 * time.Millisecond)
	}
	// 3 refused dials open the circuit (the broker takes its time to refuse a
	// login), then probes 1 s, 2 s and 4 s apart: at most 6 in 8 s, however many
	// publishes.
	if n := dials.Load(); n > 6 {
		t.Errorf("%d dials for %d publishes in %v, want at most 6", n, publishes, time.Since(start).Round(time.Millisecond))
	}
	if msg := last.Error(); !strings.Contains(msg, "refused the login") || !strings.Contains(msg, "ACCESS_REFUSED") && !strings.Contains(msg, "403") {
		t.Errorf("the error does not name the cause: %v", last)
	}
	if s, _ := reg.Snapshot(d); s.State != breaker.Closed || !strings.Contains(s.Unusable, "refused the login") {
		t.Errorf("exchange circuit %+v, want closed and unusable", s)
	}
	t.Logf("%d dials for %d publishes in %v; last error: %v", dials.Load(), publishes, time.Since(start).Round(time.Millisecond), last)
}

// 2,300 publishes at once on one Manager to a healthy broker (channel_max 2047):
// the pool bounds the channels (WithMaxChannels, default 256), so none fails and no
// circuit opens. With ChannelMax 16 and a pool of 16, 64 callers all succeed too.
func TestManyConcurrentPublishesOpenNoCircuit(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "fanout", false)
	for _, tc := range []struct {
		name    string
		callers int
		opts    []amqp.ManagerOption
	}{
		{"default pool", 2300, nil},
		{"ChannelMax 16", 64, []amqp.ManagerOption{amqp.WithConfig(amqp091.Config{ChannelMax: 16}), amqp.WithMaxChannels(16)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var opened atomic.Int64
			reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}},
				registry.WithObserver(func(_ transport.Destination, tr breaker.Transition) {
					if tr.To == breaker.Open {
						opened.Add(1)
					}
				}))
			if err != nil {
				t.Fatal(err)
			}
			m, err := amqp.NewManager(url, tc.opts...)
			if err != nil {
				t.Fatal(err)
			}
			defer m.Close()
			pub, err := amqp.NewPublisher(m, reg)
			if err != nil {
				t.Fatal(err)
			}
			var wg sync.WaitGroup
			var failed atomic.Int64
			var firstErr atomic.Value
			for range tc.callers {
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
					defer cancel()
					if err := pub.Publish(ctx, amqp.Destination(x), transport.Message{Value: []byte("m")}); err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, err)
					}
				}()
			}
			wg.Wait()
			if failed.Load() != 0 || opened.Load() != 0 {
				t.Errorf("%d of %d publishes failed (first: %v), %d circuit openings; want none", failed.Load(), tc.callers, firstErr.Load(), opened.Load())
			}
		})
	}
}

// Publishes whose confirms time out keep their channel: a slow broker is sent no
// channel.open and channel.close per timed-out publish, and the channel serves the
// next publish once the broker answers again.
func TestTimedOutPublishesKeepTheirChannel(t *testing.T) {
	p, url := newProxy(t, harness.AMQPURL(t))
	x := declareExchange(t, harness.AMQPURL(t), "fanout", false)
	// Every held publish waits out the timeout, and the healthy ones must open a channel
	// and be confirmed within it: 100ms was too short for a loaded machine.
	s := newSetup(t, url, breaker.Policy{FailureThreshold: 1 << 30, BreakDuration: time.Second}, nil, amqp.WithConfirmTimeout(roomyConfirmTimeout))
	if err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err)
	}
	p.Hold()
	for i := range 3 {
		if err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); !errors.Is(err, amqp.ErrConfirmTimeout) {
			t.Fatalf("publish %d while the broker is held: %v", i, err)
		}
	}
	p.Resume()
	if err := s.pub.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatal(err)
	}
	if n := s.m.Channels(); n != 1 {
		t.Errorf("%d channels after 3 timed-out publishes in a row, want the one they shared", n)
	}
}

// Two publishers share their Manager's pool: idle channels of one do not starve the
// other, which closes one of them and takes its slot.
func TestPublishersShareThePool(t *testing.T) {
	url := harness.AMQPURL(t)
	x := declareExchange(t, url, "fanout", false)
	declareQueue(t, url, x, "", nil) // b publishes mandatory: a queue takes its message
	m, err := amqp.NewManager(url, amqp.WithMaxChannels(2))
	if err != nil {
		t.Fatal(err)
	}
	defer m.Close()
	// b's only way to a channel is to close one of a's idle ones: without that it waits
	// out its confirm timeout and fails with errPoolWait. The timeouts are long so that
	// a loaded machine's channel opening cannot be mistaken for that wait.
	a := publisherOn(t, m, newRegistry(t), []amqp.PublisherOption{amqp.WithConfirmTimeout(10 * time.Second)})
	b := publisherOn(t, m, newRegistry(t), []amqp.PublisherOption{amqp.WithConfirmTimeout(10 * time.Second), amqp.WithMandatory()})
	var wg sync.WaitGroup
	for range 2 { // two at once: a opens both channels and keeps them idle
		wg.Go(func() {
			if err := a.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
				t.Error(err)
			}
		})
	}
	wg.Wait()
	if err := b.Publish(ctx(t), amqp.Destination(x), transport.Message{}); err != nil {
		t.Fatalf("b's publish with a's idle channels holding the pool: %v", err)
	}
	if n := m.Channels(); n > 2 {
		t.Errorf("%d channels, over the bound of 2", n)
	}
}
