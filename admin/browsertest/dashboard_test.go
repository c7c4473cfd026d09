package browsertest

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

var update = flag.Bool("update", false, "rewrite docs/dashboard.png from the browser's screenshot")

const token = "browser-test-token-0123456789"

// chromium finds the browser: CHROMIUM_PATH, else Debian's chromium on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM_PATH"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	msg := "chromium not found: run `make services` (installs Debian's chromium) or set CHROMIUM_PATH"
	if ci, _ := strconvBool(os.Getenv("CI")); ci {
		t.Fatal(msg)
	}
	t.Skip(msg)
	return ""
}

func strconvBool(s string) (bool, error) {
	switch strings.ToLower(s) {
	case "1", "t", "true", "yes":
		return true, nil
	}
	return false, errors.New("not true")
}

var (
	orders   = transport.Destination{Broker: "kafka", Name: "orders"}
	payments = transport.Destination{Broker: "kafka", Name: "payments"}
)

// service serves the dashboard of a registry on a fake clock with circuits for orders
// and payments (open after 2 failures, for brk) and an outbox whose payments are held.
func service(t *testing.T, brk time.Duration) (*registry.Registry, *fakeclock.Clock, *httptest.Server) {
	t.Helper()
	clock := fakeclock.New(time.Now())
	journal := admin.NewJournal(64)
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: brk}},
		registry.WithClock(clock), registry.WithObserver(journal.Record),
		registry.WithBreakerOptions(breaker.WithClock(clock)))
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range []transport.Destination{orders, payments} {
		if _, err := reg.Circuit(d); err != nil {
			t.Fatal(err)
		}
	}
	h, err := admin.New(reg, admin.WithMutations(token), admin.WithJournal(journal), admin.WithClock(clock),
		admin.WithOutbox(outboxStore(t, clock, orders, payments)))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return reg, clock, srv
}

func TestDashboardInChromium(t *testing.T) {
	bin := chromium(t)
	reg, clock, srv := service(t, 50*time.Second)

	ctx, consoleErrors := browser(t, bin)

	row := func(d transport.Destination) string { return `#rows tr[data-dest="` + d.String() + `"]` }
	var state, countdown string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/"),
		chromedp.WaitVisible(row(orders)+` [data-testid=state]`),
		chromedp.Text(row(orders)+` [data-testid=state]`, &state),
	); err != nil {
		t.Fatal(err)
	}
	if state != "closed" {
		t.Fatalf("orders starts %q, want closed", state)
	}

	// A failing broker opens the circuit; the page shows it within a refresh.
	fail(t, reg, orders, 2)
	if err := chromedp.Run(ctx,
		chromedp.Poll(`document.querySelector('`+row(orders)+` [data-testid=state]').textContent === "open"`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Text(row(orders)+` [data-testid=countdown]`, &countdown),
	); err != nil {
		t.Fatalf("orders never showed open: %v", err)
	}
	first, err := parseCountdown(countdown)
	if err != nil || first > 50 || first < 40 {
		t.Fatalf("countdown %q (%v), want about 50s", countdown, err)
	}
	// The countdown follows the service's clock.
	clock.Advance(20 * time.Second)
	if err := chromedp.Run(ctx, chromedp.Poll(fmt.Sprintf(
		`parseInt(document.querySelector('%s [data-testid=countdown]').textContent) <= %d`, row(orders), first-20), nil,
		chromedp.WithPollingTimeout(10*time.Second))); err != nil {
		t.Fatalf("countdown did not count down from %ds: %v", first, err)
	}
	if err := chromedp.Run(ctx, chromedp.WaitVisible(`#timeline svg`), chromedp.WaitVisible(`#events tr`)); err != nil {
		t.Fatalf("no timeline: %v", err)
	}

	// The outbox panel: the backlog per destination, the held one counting down, and
	// the dead rows by reason.
	held := `#outbox-dests tr[data-dest="kafka:payments"] [data-testid=held-countdown]`
	var heldFor, dead string
	if err := chromedp.Run(ctx,
		chromedp.WaitVisible(held),
		chromedp.Text(held, &heldFor),
		chromedp.Text(`#outbox-dead`, &dead),
	); err != nil {
		t.Fatalf("no outbox detail: %v", err)
	}
	if n, err := parseCountdown(heldFor); err != nil || n > 35 || n < 25 {
		t.Fatalf("held countdown %q (%v), want about 55s less the 20s the clock moved", heldFor, err)
	}
	if !strings.Contains(dead, "attempts_exhausted") || !strings.Contains(dead, "2") {
		t.Fatalf("dead rows by reason = %q", dead)
	}

	// A person types the token and clicks "force closed" on the open circuit.
	if err := chromedp.Run(ctx,
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery), // BySearch would also match the page's script text
		chromedp.Click(row(orders)+` button[data-act="force-close"]`),
		chromedp.Poll(`document.querySelector('`+row(orders)+` [data-testid=state]').textContent === "closed"`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
	); err != nil {
		t.Fatalf("force closed from the page: %v", err)
	}
	s := reg.Snapshots()[orders]
	if s.Override != breaker.ForcedClosed || s.State != breaker.Closed {
		t.Fatalf("after the click the circuit is %+v, want forced closed", s)
	}

	// docs/dashboard.png is the outage of TestDashboardShowsWhyAndSinceWhen.
	if errs := consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}

// browser starts a headless Chromium for the test; consoleErrors returns what the
// page logged as errors or threw so far.
func browser(t *testing.T, bin string) (ctx context.Context, consoleErrors func() []string) {
	t.Helper()
	allocCtx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.WindowSize(1200, 720))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(allocCtx)
	t.Cleanup(cancel)
	ctx, cancelTimeout := context.WithTimeout(ctx, 90*time.Second)
	t.Cleanup(cancelTimeout)

	var mu sync.Mutex
	var errs []string
	chromedp.ListenTarget(ctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch e := ev.(type) {
		case *runtime.EventConsoleAPICalled:
			if e.Type == runtime.APITypeError {
				errs = append(errs, fmt.Sprint("console.error: ", e.Args))
			}
		case *runtime.EventExceptionThrown:
			errs = append(errs, "exception: "+e.ExceptionDetails.Error())
		}
	})
	return ctx, func() []string {
		mu.Lock()
		defer mu.Unlock()
		return slices.Clone(errs)
	}
}

// A link that carries the token (#token=..., as the demo used to print) leaves it in
// the browser's history whatever the page does, so the page does not use it: it
// takes it out of the address bar and says to paste the token. A pasted token works
// and is kept in no storage.
func TestDashboardDoesNotTakeTheTokenFromALink(t *testing.T) {
	bin := chromium(t)
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := reg.Circuit(orders); err != nil {
		t.Fatal(err)
	}
	h, err := admin.New(reg, admin.WithMutations(token))
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, consoleErrors := browser(t, bin)

	row := `#rows tr[data-dest="` + orders.String() + `"]`
	var field, href, status, stored string
	if err := chromedp.Run(ctx,
		chromedp.Navigate(srv.URL+"/#token="+token),
		chromedp.WaitVisible(row+` button[data-act="force-open"]`),
		chromedp.Value(`#token`, &field, chromedp.ByQuery),
		chromedp.Evaluate(`location.href`, &href),
		chromedp.Text(`#status`, &status, chromedp.ByQuery),
	); err != nil {
		t.Fatal(err)
	}
	if field != "" {
		t.Errorf("the token field holds %q from the link", field)
	}
	if strings.Contains(href, token) || strings.Contains(href, "#") {
		t.Errorf("the address bar still shows %q", href)
	}
	if !strings.Contains(status, "not used") || !strings.Contains(status, "paste") {
		t.Errorf("status %q does not say the link's token was not used", status)
	}
	if err := chromedp.Run(ctx,
		chromedp.SendKeys(`#token`, token, chromedp.ByQuery),
		// Clicked from a script: the row is redrawn every second, and a node found
		// first and clicked later may be gone.
		chromedp.Evaluate(`document.querySelector('`+row+` button[data-act="force-open"]').click()`, nil),
		chromedp.Poll(`document.querySelector('`+row+` [data-testid=state]').textContent === "open"`, nil,
			chromedp.WithPollingTimeout(10*time.Second)),
		chromedp.Evaluate(`JSON.stringify(Object.assign({}, sessionStorage, localStorage))`, &stored),
	); err != nil {
		t.Fatalf("force open with a pasted token: %v", err)
	}
	if s := reg.Snapshots()[orders]; s.Override != breaker.ForcedOpen {
		t.Fatalf("after the click the circuit is %+v, want forced open", s)
	}
	if strings.Contains(stored, token) {
		t.Errorf("the token is in the browser's storage: %s", stored)
	}
	if errs := consoleErrors(); len(errs) > 0 {
		t.Fatalf("console errors: %v", errs)
	}
}

func parseCountdown(s string) (int, error) {
	var n int
	_, err := fmt.Sscanf(s, "%ds", &n)
	return n, err
}

func fail(t *testing.T, reg *registry.Registry, d transport.Destination, n int) {
	t.Helper()
	c, err := reg.Circuit(d)
	if err != nil {
		t.Fatal(err)
	}
	for range n {
		p, err := c.Acquire(context.Background())
		if err != nil {
			t.Fatal(err)
		}
		p.Complete(breaker.Failure)
	}
}

// outboxStore returns a memory store on clock with three rows of held, two of them
// dead (attempts_exhausted), and one pending row of each destination; held is held
// for 55s.
func outboxStore(t *testing.T, clock *fakeclock.Clock, d, held transport.Destination) *memory.Store {
	t.Helper()
	ctx := context.Background()
	s := memory.New(clock)
	entry := func(d transport.Destination) outbox.Entry {
		return outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("v")}}
	}
	if _, err := s.Enqueue(ctx, entry(held), entry(held), entry(held), entry(d)); err != nil {
		t.Fatal(err)
	}
	if recs, err := s.Claim(ctx, outbox.ClaimRequest{Token: "t", Now: clock.Now(), Limit: 2, Lease: time.Minute}); err != nil || len(recs) != 2 {
		t.Fatalf("Claim = %d, %v", len(recs), err)
	}
	if _, _, err := s.Fail(ctx, "t", []outbox.Failure{{ID: 1, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": too large"},
		{ID: 2, Dead: true, Err: outbox.ReasonAttemptsExhausted + ": too large"}}); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Hold(ctx, outbox.Hold{Destination: held, Now: clock.Now(), Until: clock.Now().Add(55 * time.Second), MaxDeferral: time.Hour}); err != nil {
		t.Fatal(err)
	}
	return s
}
