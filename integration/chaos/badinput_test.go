package chaos

import (
	"context"
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/filestate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/outbox/memory"
	"github.com/brokerguard/brokerguard/outbox/postgres"
	"github.com/brokerguard/brokerguard/outbox/storekit"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
)

// Bad input of every kind gets a clear error, and nothing is lost or left stuck. Corrupt
// DynamoDB items are shown against dynalite in integration/dynamo
// (TestCorruptItemFailsClosed).
func TestBadInput(t *testing.T) {
	t.Run("invalid policies name the field", func(t *testing.T) {
		_, err := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3, BreakDuration: time.Second}},
			registry.WithOverride("kafka:orders", registry.Policy{Circuit: breaker.Policy{FailureThreshold: 3}}))
		var pe *breaker.PolicyError
		if !errors.As(err, &pe) || pe.Field != "BreakDuration" || !strings.Contains(err.Error(), "kafka:orders") {
			t.Fatalf("registry.New: %v; want the override and the field named", err)
		}
		store, err := filestate.Open(filepath.Join(t.TempDir(), "circuits"))
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Circuit("kafka:orders", breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: breaker.LocalProcess})
		if !errors.As(err, &pe) || pe.Field != "Scope" {
			t.Fatalf("filestate with a local scope: %v", err)
		}
	})

	t.Run("malformed destinations are refused before anything is written or sent", func(t *testing.T) {
		reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}})
		called := false
		pub := reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { called = true; return nil }), nil)
		for _, d := range []transport.Destination{{Broker: "kafka"}, {Name: "orders"}, {Broker: "Kafka!", Name: "x"}, {Broker: "kafka", Name: "a\nb"}} {
			if err := pub.Publish(context.Background(), d); !errors.Is(err, transport.ErrInvalidDestination) {
				t.Errorf("%q: %v", d, err)
			}
		}
		if called || reg.Len() != 0 {
			t.Fatalf("a malformed destination reached the publisher (%v) or made a circuit (%d)", called, reg.Len())
		}
	})

	t.Run("outbox rows: malformed destination and unknown status on PostgreSQL", func(t *testing.T) {
		ctx := context.Background()
		store, pool, _ := outboxOnPostgres(t)
		tx, err := pool.Begin(ctx)
		if err != nil {
			t.Fatal(err)
		}
		_, err = store.Enqueue(ctx, postgres.Pgx(tx), outbox.Entry{Destination: transport.Destination{Broker: "kafka", Name: "bad\x00name"}})
		tx.Rollback(ctx)
		if !errors.Is(err, transport.ErrInvalidDestination) {
			t.Fatalf("Enqueue of a malformed destination: %v", err)
		}
		// A row written behind the store's back: dead with its reason, not pending forever.
		var badID, oddID int64
		if err := pool.QueryRow(ctx, `INSERT INTO brokerguard_outbox (destination, payload, created_at, visible_after)
			VALUES ('no-broker-here', 'x', now(), now()) RETURNING id`).Scan(&badID); err != nil {
			t.Fatal(err)
		}
		if _, err := pool.Exec(ctx, `UPDATE brokerguard_outbox SET status = 'sideways' WHERE id = $1`, badID); err == nil ||
			!strings.Contains(err.Error(), "brokerguard_outbox_status_check") {
			t.Fatalf("the table accepted an unknown status: %v", err)
		}
		reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second}})
		proc, err := outbox.NewProcessor(store, reg, reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { return nil }), nil))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := proc.ProcessPending(ctx); err != nil {
			t.Fatal(err)
		}
		r, err := store.Get(ctx, badID)
		if err != nil || r.Status != outbox.StatusDead || !strings.Contains(r.LastError, "invalid destination") {
			t.Fatalf("row with a malformed destination: %+v, %v; want dead with the reason", r, err)
		}
		// A table whose check was dropped by hand: the reader names the row instead of guessing.
		if _, err := pool.Exec(ctx, `ALTER TABLE brokerguard_outbox DROP CONSTRAINT brokerguard_outbox_status_check`); err != nil {
			t.Fatal(err)
		}
		if err := pool.QueryRow(ctx, `INSERT INTO brokerguard_outbox (destination, payload, created_at, visible_after, status)
			VALUES ('kafka:orders', 'x', now(), now(), 'sideways') RETURNING id`).Scan(&oddID); err != nil {
			t.Fatal(err)
		}
		var unknown *storekit.UnknownStatusError
		if _, err := store.Get(ctx, oddID); !errors.As(err, &unknown) || unknown.ID != oddID || unknown.Status != "sideways" {
			t.Fatalf("reading a row with an unknown status: %v", err)
		}
	})

	t.Run("an oversized message is refused at Enqueue and never opens the circuit", func(t *testing.T) {
		srv, err := sqstest.New()
		if err != nil {
			t.Fatal(err)
		}
		defer srv.Close()
		client := awssqs.New(awssqs.Options{
			BaseEndpoint: aws.String(srv.URL()), Region: "us-east-1",
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", ""),
			HTTPClient:  &http.Client{},
		})
		if _, err := client.CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String("invoices")}); err != nil {
			t.Fatal(err)
		}
		clock := fakeclock.New(time.Now())
		reg, _ := registry.New(registry.Policy{Circuit: breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute}}, registry.WithClock(clock))
		pub, err := sqs.NewPublisher(client, reg)
		if err != nil {
			t.Fatal(err)
		}
		store := memory.New(clock)
		d := transport.Destination{Broker: "sqs", Name: "invoices"}
		// Over SQS's 256 KiB, the message is refused by Enqueue, in the caller's
		// transaction, rather than stored to be refused by SQS at every attempt.
		_, err = store.Enqueue(context.Background(),
			outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("small")}},
			outbox.Entry{Destination: d, Message: transport.Message{Value: []byte(strings.Repeat("x", 300<<10))}})
		if !errors.Is(err, outbox.ErrTooLarge) || !strings.Contains(err.Error(), "sqs:invoices") {
			t.Fatalf("Enqueue of a 300 KiB SQS message: %v; want outbox.ErrTooLarge naming the queue", err)
		}
		ids, err := store.Enqueue(context.Background(),
			outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("small")}},
			outbox.Entry{Destination: d, Message: transport.Message{Value: []byte("also small")}})
		if err != nil {
			t.Fatal(err)
		}
		proc, err := outbox.NewProcessor(store, reg, pub, outbox.WithClock(clock), outbox.WithMaxAttempts(1))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := proc.ProcessPending(context.Background()); err != nil {
			t.Fatal(err)
		}
		if got := len(srv.Messages("invoices")); got != 2 || len(store.Records()) != 2 {
			t.Fatalf("%d messages on the queue, %d rows stored; want the two small ones", got, len(store.Records()))
		}
		for i := range ids {
			if r, _ := store.Get(ids[i]); r.Status != outbox.StatusPublished {
				t.Fatalf("row %d: %s (%s), want published", i, r.Status, r.LastError)
			}
		}
		if s := reg.Snapshots()[d]; s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("an oversized message counted against the queue: %+v", s)
		}
		record(result{"bad input: oversized SQS message refused at Enqueue, good ones published", 2, 2, 0, 0, 0})
	})

	t.Run("a corrupt file-state record fails closed until cleared", func(t *testing.T) {
		root := filepath.Join(t.TempDir(), "circuits")
		store, err := filestate.Open(root)
		if err != nil {
			t.Fatal(err)
		}
		p := breaker.Policy{FailureThreshold: 1, BreakDuration: time.Second, Scope: breaker.SingleHost}
		c, err := store.Circuit("kafka:orders", p)
		if err != nil {
			t.Fatal(err)
		}
		if pm, err := c.Acquire(context.Background()); err != nil {
			t.Fatal(err)
		} else {
			pm.Complete(breaker.Success)
		}
		files, _ := filepath.Glob(filepath.Join(root, "*.json"))
		if len(files) != 1 {
			t.Fatalf("state files %v", files)
		}
		if err := os.WriteFile(files[0], []byte(`{"version":1,"state":`), 0o600); err != nil {
			t.Fatal(err)
		}
		fresh, _ := filestate.Open(root) // a process starting now
		c, _ = fresh.Circuit("kafka:orders", p)
		if _, err := c.Acquire(context.Background()); !errors.Is(err, breaker.ErrUnavailable) || !errors.Is(err, filestate.ErrCorrupt) {
			t.Fatalf("Acquire on a corrupt record: %v; want it refused", err)
		}
		if err := fresh.Clear("kafka:orders"); err != nil {
			t.Fatal(err)
		}
		if _, err := c.Acquire(context.Background()); err != nil {
			t.Fatalf("after Clear: %v", err)
		}
	})
}

// publisherFunc adapts a function to transport.Publisher.
type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}
