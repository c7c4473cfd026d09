package browsertest

import (
	"context"
	"errors"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// failWith completes one permit of d's circuit with a failure and its error, as a
// guarded publish does; it skips a refused Acquire (an open circuit).
func failWith(t *testing.T, reg *registry.Registry, d transport.Destination, err error) bool {
	t.Helper()
	c, cerr := reg.Circuit(d)
	if cerr != nil {
		t.Fatal(cerr)
	}
	p, aerr := c.Acquire(context.Background())
	if aerr != nil {
		return false
	}
	return p.CompleteWith(breaker.Failure, err)
}

// TestDashboardShowsWhyAndSinceWhen: during an outage with 2 s breaks and twelve failed
// probes, the page shows the broker's error (redacted), when the outage began, the
// probes collapsed into one line after the opening, and a timeline as long as the
// process's life. It writes docs/dashboard.png with -update.
func TestDashboardShowsWhyAndSinceWhen(t *testing.T) {
	bin := chromium(t)
	reg, clock, srv := service(t, 2*time.Second)

	clock.Advance(8 * time.Second)
	opened := clock.Now()
	brokerErr := errors.New("kafka: LEADER_NOT_AVAILABLE: no leader for payments/3 (dialed sasl://svc:s3cret@broker-2:9092)")
	for range 2 {
		failWith(t, reg, payments, brokerErr)
	}
	for probes := 0; probes < 12; {
		clock.Advance(2500 * time.Millisecond)
		if failWith(t, reg, payments, brokerErr) {
			probes++
		}
	}
	clock.Advance(time.Second)
	if s := reg.Snapshots()[payments]; s.FailedProbes != 12 || !s.UnhealthySince.Equal(opened) {
		t.Fatalf("snapshot %+v", s)
	}

	ctx, consoleErrors := browser(t, bin)
	why := `#rows tr[data-why="kafka:payments"]`
	// The page redraws its rows every second: read them in one script, not node by
	// node (a node can be replaced between finding and reading it).
	text := func(sel string) string {
		return `(document.querySelector(` + strconv.Quote(sel) + `) || {textContent: ""}).textContent`
	}
	var page struct{ Since, LastErr, Probing, Events, Span string }
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(why+` [data-testid=unhealthy-since]`),
		chromedp.WaitVisible(`#events tr[data-testid=probing]`),
		chromedp.Evaluate(`({Since: `+text(why+` [data-testid=unhealthy-since]`)+`, LastErr: `+text(why+` [data-testid=last-error]`)+
			`, Probing: `+text(`#events tr[data-testid=probing]`)+`, Events: `+text(`#events`)+
			`, Span: document.querySelector("#timeline svg").getAttribute("data-span-ms")})`, &page),
	); err != nil {
		t.Fatal(err)
	}
	since, lastErr, probing, events, span := page.Since, page.LastErr, page.Probing, page.Events, page.Span
	// Times as the page writes them, in the browser's locale and zone.
	var openedText, probingText string
	localTime := func(at time.Time) string {
		return `new Date(` + strconv.FormatInt(at.UnixMilli(), 10) + `).toLocaleTimeString()`
	}
	if err := chromedp.Run(ctx, chromedp.Evaluate(localTime(opened), &openedText),
		chromedp.Evaluate(localTime(opened.Add(2500*time.Millisecond)), &probingText)); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(since, "unhealthy since "+openedText) || !strings.Contains(since, "12 failed probes") {
		t.Errorf("unhealthy line %q; want since %s and 12 failed probes", since, openedText)
	}
	if !strings.Contains(lastErr, "LEADER_NOT_AVAILABLE") || !strings.Contains(lastErr, "sasl://[redacted]@broker-2") || strings.Contains(lastErr, "s3cret") {
		t.Errorf("last error %q", lastErr)
	}
	if !strings.Contains(probing, "probing since "+probingText) || !strings.Contains(probing, "12 failed probes") {
		t.Errorf("probing line %q; want since %s (the first break's end) and 12 failed probes", probing, probingText)
	}
	if !strings.Contains(events, "failure_threshold") || strings.Count(events, "probe_failed") != 0 {
		t.Errorf("events %q: want the opening and one probing line, not each probe", events)
	}
	// The process is 39 s old: the timeline spans that, not five minutes.
	if ms, err := strconv.Atoi(span); err != nil || ms > 60_000 || ms < 30_000 {
		t.Errorf("timeline spans %q ms; want the process's 39 s", span)
	}
	if t.Failed() {
		return
	}
	var png []byte
	if err := chromedp.Run(ctx, chromedp.FullScreenshot(&png, 100)); err != nil {
		t.Fatal(err)
	}
	if *update {
		if err := os.WriteFile("../../docs/dashboard.png", png, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}
