package outbox_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The test binary doubles as a dispatcher process: with childEnv set, TestMain runs
// one batch as the child of TestKilledDispatcherLosesNothing instead of the tests.
const (
	childEnv     = "BROKERGUARD_OUTBOX_CHILD"
	childBrokers = "BROKERGUARD_OUTBOX_CHILD_BROKERS"
	childOwner   = "BROKERGUARD_OUTBOX_CHILD_OWNER"
	childLease   = 30 * time.Second
	midBatch     = "mid-batch" // the line the child prints before it hangs
)

func TestMain(m *testing.M) {
	if dsn := os.Getenv(childEnv); dsn != "" {
		if err := runChild(dsn); err != nil {
			fmt.Fprintln(os.Stderr, "child dispatcher:", err)
			os.Exit(2)
		}
		os.Exit(0)
	}
	if dsn := os.Getenv(relayEnv); dsn != "" {
		err := runRelay(dsn)
		fmt.Fprintln(os.Stderr, "relay process:", err)
		os.Exit(2)
	}
	os.Exit(m.Run())
}

// runChild claims one batch and publishes its first destination; on the second it
// prints midBatch and hangs until it is killed.
func runChild(dsn string) error {
	ctx := context.Background()
	pool, err := openPool(dsn, nil)
	if err != nil {
		return err
	}
	defer pool.Close()
	store := postgres.New(pool)
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}})
	if err != nil {
		return err
	}
	kp := newKafkaPublisher(strings.Split(os.Getenv(childBrokers), ","))
	defer kp.Close()
	kafkaPub := reg.Guard(kp, nil)
	calls := 0
	pub := publisherFunc(func(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
		if calls++; calls == 2 {
			fmt.Println(midBatch)
			time.Sleep(time.Hour) // a dispatcher stuck mid-batch; the parent kills it
		}
		return kafkaPub.Publish(ctx, d, msgs...)
	})
	proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClassifier(outageOnError), outbox.WithOwner(os.Getenv(childOwner)),
		outbox.WithBatchSize(1000), outbox.WithLease(childLease), outbox.WithIDHeader(idHeader))
	if err != nil {
		return err
	}
	_, err = proc.ProcessPending(ctx)
	return errors.Join(err, errors.New("the batch ended without hanging"))
}

func TestKilledDispatcherLosesNothing(t *testing.T) {
	e := newEnv(t, nil)
	var all []int64
	for _, d := range []transport.Destination{orders, emails, {Broker: "kafka", Name: "invoices"}} {
		all = append(all, e.enqueue(t, d, 100)...)
	}

	const owner = "child-dispatcher"
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), childEnv+"="+e.dsn, childBrokers+"="+strings.Join(e.brokers, ","), childOwner+"="+owner)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	killed := false
	t.Cleanup(func() {
		if !killed {
			_ = cmd.Process.Kill()
			_ = cmd.Wait()
		}
	})
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	select {
	case line, ok := <-lines:
		if !ok || line != midBatch {
			t.Fatalf("child said %q (stderr: %s), want %q", line, stderr.String(), midBatch)
		}
	case <-time.After(time.Minute):
		t.Fatalf("the child did not reach the middle of its batch in a minute (stderr: %s)", stderr.String())
	}
	if err := cmd.Process.Kill(); err != nil { // SIGKILL: no deferred code, no lease release
		t.Fatal(err)
	}
	killed = true
	if err := cmd.Wait(); err == nil {
		t.Fatal("the child exited cleanly; want killed")
	}
	for range lines { // the reader goroutine ends with the pipe
	}

	published := e.countRows(t, "status = 'published'")
	leased := e.countRows(t, "status = 'pending' AND lease_owner LIKE $1", owner+"/%")
	if published != 100 || leased != 200 {
		t.Fatalf("after the kill: %d published, %d leased by the dead child; want 100 and 200", published, leased)
	}

	// Another dispatcher: nothing to claim while the dead child's lease lasts...
	reg, counted, pub := e.guarded(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, e.brokers)
	now := fakeclock.New(time.Now())
	proc, err := outbox.NewProcessor(e.store, reg, pub, outbox.WithClock(now), outbox.WithBatchSize(1000), outbox.WithIDHeader(idHeader))
	if err != nil {
		t.Fatal(err)
	}
	if rep, err := proc.ProcessPending(context.Background()); err != nil || rep.Claimed != 0 {
		t.Fatalf("ProcessPending during the dead child's lease = %+v, %v; want nothing claimed", rep, err)
	}
	// ...and everything once it has ended.
	now.Advance(childLease)
	rep, err := proc.ProcessPending(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	if rep.Total() != (outbox.Counts{Published: 200}) {
		t.Fatalf("after the lease: %+v, want the 200 rows the child left published", rep.Total())
	}
	if n := e.countRows(t, "status = 'published'"); n != len(all) {
		t.Errorf("%d of %d rows published", n, len(all))
	}
	got := consumeIDs(t, e.brokers, len(all), "orders", "emails", "invoices")
	for _, id := range all {
		if got[id] != 1 {
			t.Errorf("row %d delivered %d times, want once", id, got[id])
		}
	}
	if len(counted.published()) != 200 {
		t.Errorf("the second dispatcher published %d rows, want 200", len(counted.published()))
	}
}

func TestTwoDispatchersDeliverEveryRowOnce(t *testing.T) {
	const rows = 10_000
	e := newEnv(t, nil)
	dests := []transport.Destination{orders, emails, {Broker: "kafka", Name: "invoices"}, {Broker: "kafka", Name: "audit"}}
	var all []int64
	for _, d := range dests {
		all = append(all, e.enqueue(t, d, rows/len(dests))...)
	}

	type dispatcher struct {
		proc    *outbox.Processor
		counted *countingPublisher
	}
	var ds []dispatcher
	done := &publishedCount{want: rows, done: make(chan struct{})}
	for i := range 2 {
		pool := newPool(t, e.dsn, nil) // as if in its own process
		reg, counted, pub := e.guarded(t, breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}, e.brokers)
		proc, err := outbox.NewProcessor(postgres.New(pool), reg, pub, outbox.WithOwner(fmt.Sprintf("dispatcher-%d", i)),
			outbox.WithBatchSize(200), outbox.WithLease(time.Minute), outbox.WithPollInterval(10*time.Millisecond),
			outbox.WithIDHeader(idHeader), outbox.WithHooks(done))
		if err != nil {
			t.Fatal(err)
		}
		ds = append(ds, dispatcher{proc, counted})
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	errs := make([]error, len(ds))
	for i, d := range ds {
		wg.Go(func() { errs[i] = d.proc.Run(ctx) })
	}
	select {
	case <-done.done:
	case <-time.After(2 * time.Minute):
		t.Error("the dispatchers did not publish every row in two minutes")
	}
	cancel()
	wg.Wait()
	for i, err := range errs {
		if err != nil {
			t.Errorf("dispatcher %d: %v", i, err)
		}
	}

	if n := e.countRows(t, "status = 'published'"); n != rows {
		t.Fatalf("%d of %d rows published", n, rows)
	}
	publishes := map[int64]int{}
	for i, d := range ds {
		ids := d.counted.published()
		if len(ids) == 0 {
			t.Errorf("dispatcher %d published nothing; the test did not run them side by side", i)
		}
		for id, n := range ids {
			publishes[id] += n
		}
	}
	delivered := consumeIDs(t, e.brokers, rows, "orders", "emails", "invoices", "audit")
	for _, id := range all {
		if publishes[id] != 1 || delivered[id] != 1 {
			t.Fatalf("row %d: published %d times, delivered %d times; want once", id, publishes[id], delivered[id])
		}
	}
	if len(delivered) != rows {
		t.Errorf("%d distinct rows delivered, want %d", len(delivered), rows)
	}
}

// publishedCount closes done once the dispatchers reported want published rows.
type publishedCount struct {
	mu   sync.Mutex
	n    int
	want int
	done chan struct{}
}

func (p *publishedCount) RecordDispatch(_ transport.Destination, published, _, _, _ int) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.n < p.want && p.n+published >= p.want {
		close(p.done)
	}
	p.n += published
}
