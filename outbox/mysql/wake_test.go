package mysql_test

import (
	"context"
	"testing"

	"github.com/brokerguard/brokerguard/outbox"
	"github.com/brokerguard/brokerguard/transport"
)

var orders = transport.Destination{Broker: "kafka", Name: "orders"}

func entries(n int) []outbox.Entry {
	out := make([]outbox.Entry, n)
	for i := range out {
		out[i] = outbox.Entry{Destination: orders, Message: transport.Message{Value: []byte{byte(i)}}}
	}
	return out
}

// A Processor's Waker hears Commit and Wake, a commit through a *sql.DB, and nothing
// of a transaction that rolled back; it is woken once as it starts listening.
func TestCommitWakesTheStoresListeners(t *testing.T) {
	s, db := testStore(t)
	ctx, cancel := context.WithCancel(context.Background())
	woken := make(chan struct{}, 10)
	stopped := make(chan error)
	go func() { stopped <- s.CommitWaker().Listen(ctx, func() { woken <- struct{}{} }) }()
	<-woken // the wake for rows committed before it listened
	expect := func(what string, n int) {
		t.Helper()
		for range n {
			<-woken
		}
		select {
		case <-woken:
			t.Fatalf("%s: a wake more than %d", what, n)
		default:
		}
	}

	tx, err := db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, tx, entries(2)...); err != nil {
		t.Fatal(err)
	}
	if err := tx.Rollback(); err != nil {
		t.Fatal(err)
	}
	expect("rollback", 0)

	tx, err = db.Begin()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Enqueue(ctx, tx, entries(2)...); err != nil {
		t.Fatal(err)
	}
	expect("enqueue in a transaction not yet committed", 0)
	if err := s.Commit(tx); err != nil {
		t.Fatal(err)
	}
	expect("Commit", 1)

	if _, err := s.Enqueue(ctx, db, entries(1)...); err != nil {
		t.Fatal(err)
	}
	expect("Enqueue on a *sql.DB", 1)

	if err := s.Commit(tx); err == nil {
		t.Fatal("a second Commit of the transaction succeeded")
	}
	expect("a Commit that failed", 0)

	s.Wake()
	expect("Wake", 1)
	cancel()
	if err := <-stopped; err != nil {
		t.Fatalf("Listen returned %v when its context ended", err)
	}
	s.Wake() // nobody listens: nothing blocks, nothing is called
	expect("Wake after Listen returned", 0)
}
