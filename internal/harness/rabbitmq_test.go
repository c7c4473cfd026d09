package harness

import (
	"context"
	"errors"
	"sync"
	"syscall"
	"testing"
	"time"

	amqp "github.com/rabbitmq/amqp091-go"
)

// openChannel dials the broker and opens a channel, the least a publisher needs.
func openChannel(url string) error {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
	if err != nil {
		return err
	}
	defer conn.Close()
	ch, err := conn.Channel()
	if err != nil {
		return err
	}
	return ch.Close()
}

func TestRabbitMQReachable(t *testing.T) {
	if err := openChannel(AMQPURL(t)); err != nil {
		t.Fatal(err)
	}
	out, err := RabbitCtl(t, "-q", "list_vhosts")
	if err != nil {
		t.Fatal(err)
	}
	if out == "" {
		t.Fatal("rabbitmqctl list_vhosts printed nothing; want at least the default vhost")
	}
}

// confirmedPublisher publishes to the default exchange of url with confirms, once
// every 20ms until stop is closed, and counts the publishes that were not confirmed.
func confirmedPublisher(t *testing.T, url string, stop <-chan struct{}) (sent, failed func() int) {
	conn, err := amqp.DialConfig(url, amqp.Config{Dial: amqp.DefaultDial(dialTimeout)})
	if err != nil {
		t.Fatal(err)
	}
	ch, err := conn.Channel()
	if err != nil {
		t.Fatal(err)
	}
	if err := ch.Confirm(false); err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	var n, bad int
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			dc, err := ch.PublishWithDeferredConfirmWithContext(ctx, "", "brokerguard-harness-nobody", false, false, amqp.Publishing{Body: []byte("x")})
			ok := err == nil
			if ok {
				ok, err = dc.WaitContext(ctx)
			}
			cancel()
			mu.Lock()
			n++
			if !ok || err != nil {
				bad++
			}
			mu.Unlock()
		}
	}()
	t.Cleanup(func() { wg.Wait(); conn.Close() })
	read := func(p *int) func() int {
		return func() int { mu.Lock(); defer mu.Unlock(); return *p }
	}
	return read(&n), read(&bad)
}

// A private node is stopped, started and blocked while a client of the machine's
// broker publishes with confirms: that client sees no outage.
func TestRabbitNodeFaultsLeaveTheMachinesBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a RabbitMQ node of its own (tens of seconds); not run with -short")
	}
	shared := AMQPURL(t)
	node := NewRabbitNode(t)
	if node.URL() == shared {
		t.Fatalf("the private node has the machine's URL %s", shared)
	}
	stop := make(chan struct{})
	sent, failed := confirmedPublisher(t, shared, stop)
	defer close(stop)

	node.StopApp(t)
	if err := openChannel(node.URL()); !errors.Is(err, syscall.ECONNREFUSED) {
		t.Fatalf("dial with the node's app stopped: %v; want connection refused", err)
	}
	start := time.Now()
	node.StartApp(t)
	t.Logf("start_app until AMQP answered: %v", time.Since(start).Round(time.Millisecond))
	if err := openChannel(node.URL()); err != nil {
		t.Fatal(err)
	}
	node.Block(t)
	node.Unblock(t)
	if sent() == 0 || failed() != 0 {
		t.Fatalf("the machine's broker during the private node's faults: %d publishes, %d not confirmed", sent(), failed())
	}
	t.Logf("the machine's broker confirmed all %d publishes made meanwhile", sent())
}
