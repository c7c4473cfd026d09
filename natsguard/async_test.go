package natsguard_test

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/natsguard"
	"github.com/brokerguard/brokerguard/transport"
)

// Workers publish asynchronously to two streams of a private server while it is
// stopped and started again under them, some with contexts they cancel: every
// message that was sent gets its promise exactly once, every permit is completed
// (none in flight afterwards), and each circuit counted exactly the calls whose
// promises came.
func TestAsyncCompletesEveryPermitOnceAcrossARestart(t *testing.T) {
	server := privateServer(t)
	e := newEnv(t, server.URL(), counting, []jetstream.JetStreamOpt{jetstream.WithDefaultTimeout(2 * time.Second)})
	var dests [2]transport.Destination
	var subjects [2]func(string) string
	dests[0], subjects[0] = newStream(t, e.js, "one", jetstream.StreamConfig{})
	dests[1], subjects[1] = newStream(t, e.js, "two", jetstream.StreamConfig{})

	reconnected := e.nc.StatusChanged(nats.CONNECTED)
	const workers, each = 6, 150
	var promises [workers * each]atomic.Int32
	var sent, refused atomic.Int64
	var perDest [2]atomic.Int64
	var failures atomic.Int64
	var wg, done sync.WaitGroup
	restart := make(chan struct{})
	var mu sync.Mutex
	var cancels []context.CancelFunc // called once every promise came
	kinds := map[string]int{}
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if w == 0 && i == each/3 {
					close(restart) // the others go on publishing while it happens
				}
				k := w*each + i
				which := k % 2
				ctx, cancel := context.WithCancel(context.Background())
				if k%7 == 0 {
					cancel() // some callers give up before their ack comes
				}
				msg := transport.Message{Key: []byte(subjects[which](fmt.Sprint(w))), Value: fmt.Appendf(nil, "%d", k)}
				done.Add(1)
				err := e.p.PublishAsync(ctx, dests[which], msg, func(_ *jetstream.PubAck, err error) {
					promises[k].Add(1)
					perDest[which].Add(1)
					if err != nil {
						failures.Add(1)
						mu.Lock()
						kinds[fmt.Sprintf("%T %v", err, natsguard.Classify(err))]++
						mu.Unlock()
					}
					done.Done()
				})
				if err != nil {
					done.Done()
					refused.Add(1)
				} else {
					sent.Add(1)
				}
				mu.Lock()
				cancels = append(cancels, cancel)
				mu.Unlock()
			}
		})
	}
	<-restart
	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	<-reconnected
	wg.Wait()
	done.Wait()
	for _, cancel := range cancels {
		cancel()
	}

	var got int64
	for k := range promises {
		switch n := promises[k].Load(); n {
		case 0:
		case 1:
			got++
		default:
			t.Errorf("message %d: %d promises", k, n)
		}
	}
	t.Logf("%d sent, %d refused at once, %d promises, %d of them errors: %v", sent.Load(), refused.Load(), got, failures.Load(), kinds)
	if got != sent.Load() {
		t.Errorf("%d promises for %d messages sent", got, sent.Load())
	}
	var all uint64
	for i, d := range dests {
		c := e.calls(d)
		all += c.Total()
		if c.Total() != uint64(perDest[i].Load()) || c.Rejected != 0 {
			t.Errorf("%s counted %+v for %d promises", d, c, perDest[i].Load())
		}
		e.idle(d)
	}
	if c := e.calls(e.p.Connection()); c.Total() != all {
		t.Errorf("the connection counted %+v for %d calls", c, all)
	}
}
