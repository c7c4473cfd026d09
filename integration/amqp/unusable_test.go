package amqp_test

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	bgadmin "github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/amqp"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/integration/harness"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
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
	reg, err := registry.New(breaker.Policy{FailureThreshold: 3, BreakDuration: time.Minute}, registry.WithClock(clock))
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
	store := outbox.NewMemoryStore(clock)
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

// A write permission revoked for ten minutes (403 ACCESS_REFUSED on the exchange):
// the outbox holds the exchange, charges no row, and publishes them all in order once
// the permission is back.
func TestRevokedPermissionHoldsTheOutbox(t *testing.T) {
	tenant := harness.NewRabbitTenant(t)
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
func TestMissingExchangeHoldsTheOutbox(t *testing.T) {
	tenant := harness.NewRabbitTenant(t)
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
