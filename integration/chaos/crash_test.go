package chaos

import (
	"context"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	kafkago "github.com/segmentio/kafka-go"
	"github.com/twmb/franz-go/pkg/kfake"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/kafka"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// The dispatcher child: when these are set, the test binary is a dispatcher process
// and nothing else.
const (
	envChildDSN   = "BROKERGUARD_CHAOS_DISPATCHER_DSN"
	envChildKafka = "BROKERGUARD_CHAOS_DISPATCHER_KAFKA"
	crashLease    = time.Second
)

func TestMain(m *testing.M) {
	if dsn := os.Getenv(envChildDSN); dsn != "" {
		if err := dispatchUntilKilled(dsn, strings.Split(os.Getenv(envChildKafka), ",")); err != nil {
			fmt.Fprintln(os.Stderr, "dispatcher child:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	code := m.Run()
	printSummary(os.Stdout)
	os.Exit(code)
}

// newDispatcher is a processor on the outbox at dsn publishing to Kafka at brokers.
func newDispatcher(ctx context.Context, dsn string, brokers []string) (*outbox.Processor, *postgres.Store, func(), error) {
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return nil, nil, nil, err
	}
	reg, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: 200 * time.Millisecond}})
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	pub, err := kafka.NewPublisher(&kafkago.Writer{Addr: kafkago.TCP(brokers...), RequiredAcks: kafkago.RequireAll,
		MaxAttempts: 1, BatchTimeout: time.Millisecond, WriteTimeout: 2 * time.Second}, reg)
	if err != nil {
		pool.Close()
		return nil, nil, nil, err
	}
	store := postgres.New(pool)
	proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithIDHeader(idHeader), outbox.WithBatchSize(100),
		outbox.WithLease(crashLease), outbox.WithPollInterval(10*time.Millisecond))
	return proc, store, func() { pub.Close(context.Background()); pool.Close() }, err
}

func dispatchUntilKilled(dsn string, brokers []string) error {
	proc, _, closeFn, err := newDispatcher(context.Background(), dsn, brokers)
	if err != nil {
		return err
	}
	defer closeFn()
	return proc.Run(context.Background()) // until SIGKILL
}

// TestDispatcherCrashes kills a dispatcher process with SIGKILL at random moments
// mid-batch, five times; a last dispatcher then finishes. Every row must be on Kafka.
func TestDispatcherCrashes(t *testing.T) {
	if testing.Short() {
		t.Skip("the crash scenario starts and kills five processes; it runs without -short")
	}
	ctx := context.Background()
	topics := []string{"crash-a", "crash-b"}
	cluster := harness.KFake(t, kfake.SeedTopics(1, topics...))
	store, pool, dsn := outboxOnPostgres(t)
	const total = 6000
	var ids []int64
	entries := make([]outbox.Entry, total)
	for i := range entries {
		entries[i] = outbox.Entry{Destination: transport.Destination{Broker: "kafka", Name: topics[i%2]}, Message: transport.Message{Value: fmt.Appendf(nil, "row %d", i)}}
	}
	if err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) (err error) {
		ids, err = store.Enqueue(ctx, postgres.Pgx(tx), entries...)
		return err
	}); err != nil {
		t.Fatal(err)
	}
	published := func() int {
		var n int
		if err := pool.QueryRow(ctx, `SELECT count(*) FROM brokerguard_outbox WHERE status = 'published'`).Scan(&n); err != nil {
			t.Fatal(err)
		}
		return n
	}

	start := time.Now()
	for kill := range 5 {
		before := published()
		child := exec.Command(os.Args[0], "-test.run=^$")
		child.Env = append(os.Environ(), envChildDSN+"="+dsn, envChildKafka+"="+strings.Join(cluster.ListenAddrs(), ","))
		child.Stderr = os.Stderr
		if err := child.Start(); err != nil {
			t.Fatal(err)
		}
		// Kill it once it is publishing, at a random moment within its next batches.
		deadline := time.Now().Add(30 * time.Second)
		for published() == before {
			if time.Now().After(deadline) {
				child.Process.Kill()
				t.Fatalf("dispatcher %d published nothing in 30s", kill+1)
			}
			time.Sleep(5 * time.Millisecond)
		}
		time.Sleep(time.Duration(rand.IntN(60)) * time.Millisecond)
		if err := child.Process.Signal(syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		state, _ := child.Process.Wait()
		if ws, ok := state.Sys().(syscall.WaitStatus); !ok || ws.Signal() != syscall.SIGKILL {
			t.Fatalf("dispatcher %d ended with %v, not SIGKILL", kill+1, state)
		}
		var leased int
		pool.QueryRow(ctx, `SELECT count(*) FROM brokerguard_outbox WHERE status = 'pending' AND lease_until > now()`).Scan(&leased)
		t.Logf("kill %d: %d rows published so far, %d left leased by the dead dispatcher", kill+1, published(), leased)
	}

	// A last dispatcher takes over once the dead ones' leases end.
	proc, _, closeFn, err := newDispatcher(ctx, dsn, cluster.ListenAddrs())
	if err != nil {
		t.Fatal(err)
	}
	defer closeFn()
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- proc.Run(runCtx) }()
	deadline := time.Now().Add(60 * time.Second)
	for published() < total && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if err := <-done; err != nil {
		t.Fatal(err)
	}

	onBroker := map[string]int{}
	for _, topic := range topics {
		for id, n := range kafkaIDs(t, cluster, topic) {
			onBroker[id] += n
		}
	}
	var delivered, duplicates int
	for _, id := range ids {
		r, err := store.Get(ctx, id)
		if err != nil {
			t.Fatal(err)
		}
		n := onBroker[strconv.FormatInt(id, 10)]
		if r.Status != outbox.StatusPublished || n == 0 {
			t.Errorf("row %d: %s, %d copies on Kafka", id, r.Status, n)
		}
		delivered += min(n, 1)
		duplicates += max(n-1, 0)
	}
	record(result{"5 dispatcher crashes (kill -9 mid-batch)", total, delivered, duplicates, total - delivered, time.Since(start)})
	if delivered != total {
		t.Fatalf("%d of %d rows delivered", delivered, total)
	}
}
