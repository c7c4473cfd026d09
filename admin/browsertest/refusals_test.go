package browsertest

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// TestDashboardShowsEveryRefusingMechanism: a Kafka partition isolated under its
// topic's closed circuit and an AMQP connection circuit a registry adopted are on the
// page: the partition under its topic with its last error and in the events (named,
// without colouring the topic's lane), the connection circuit as a row of its own,
// open, with the dial's error.
func TestDashboardShowsEveryRefusingMechanism(t *testing.T) {
	bin := chromium(t)
	reg, clock, srv := service(t, 50*time.Second)

	ps, err := reg.Partitions(orders)
	if err != nil {
		t.Fatal(err)
	}
	ps.SetCount(3)
	ps.Complete(0, breaker.Success) // partition 0 answers: the topic stays closed
	for range 2 {                   // the service's FailureThreshold
		ps.CompleteWith(2, breaker.Failure, errors.New("kafka: NOT_LEADER_OR_FOLLOWER"))
	}
	conn := transport.Destination{Broker: "amqp-connection", Name: "127.0.0.1:5672"}
	cc, err := breaker.New(conn.String(), breaker.Policy{FailureThreshold: 1, BreakDuration: 30 * time.Second}, breaker.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	if err := reg.Adopt(conn, cc); err != nil {
		t.Fatal(err)
	}
	p, err := cc.Acquire(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	p.CompleteWith(breaker.Failure, errors.New("dial tcp 127.0.0.1:5672: connect: connection refused"))
	if s, _ := reg.Snapshot(orders); s.State != breaker.Closed || len(reg.IsolatedPartitions(orders)) != 1 {
		t.Fatalf("orders %v with %+v isolated; want closed with partition 2", s.State, reg.IsolatedPartitions(orders))
	}

	ctx, consoleErrors := browser(t, bin)
	text := func(sel string) string {
		return `(document.querySelector(` + strconv.Quote(sel) + `) || {textContent: ""}).textContent`
	}
	parts := `#rows tr[data-why="kafka:orders"] [data-testid=isolated-partitions]`
	connRow := `#rows tr[data-dest="` + conn.String() + `"]`
	var page struct {
		Parts, OrdersState, ConnState, ConnErr, Event string
		OpenRects                                     int
	}
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(parts),
		chromedp.WaitVisible(connRow),
		chromedp.WaitVisible(`#events tr[data-testid=partition-event]`),
		chromedp.Evaluate(`({Parts: `+text(parts)+`, OrdersState: `+text(`#rows tr[data-dest="kafka:orders"] [data-testid=state]`)+
			`, ConnState: `+text(connRow+` [data-testid=state]`)+
			`, ConnErr: `+text(`#rows tr[data-why="`+conn.String()+`"] [data-testid=last-error]`)+
			`, Event: `+text(`#events tr[data-testid=partition-event]`)+
			`, OpenRects: document.querySelectorAll('#timeline rect[fill="var(--open)"]').length})`, &page),
	); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(page.Parts, "isolated partition 2") || !strings.Contains(page.Parts, "NOT_LEADER_OR_FOLLOWER") {
		t.Errorf("isolated partitions %q; want partition 2 with its error", page.Parts)
	}
	if page.OrdersState != "closed" {
		t.Errorf("orders state %q; want closed (a partition's isolation is not the topic's)", page.OrdersState)
	}
	if page.ConnState != "open" || !strings.Contains(page.ConnErr, "connection refused") {
		t.Errorf("connection circuit %q with error %q; want open with the dial's error", page.ConnState, page.ConnErr)
	}
	if !strings.Contains(page.Event, "kafka:orders partition 2") || !strings.Contains(page.Event, registry.ReasonPartitionIsolated) {
		t.Errorf("partition event %q; want partition 2 of kafka:orders isolated", page.Event)
	}
	if page.OpenRects != 1 {
		t.Errorf("%d open stretches on the timeline; want the connection circuit's only", page.OpenRects)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}
