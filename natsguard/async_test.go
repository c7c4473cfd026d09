package natsguard_test

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/brokerguard/brokerguard/internal/harness"
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
	var done sync.WaitGroup
	restart := make(chan struct{})
	var mu sync.Mutex
	var cancels []context.CancelFunc // called once every promise came
	kinds := map[string]int{}
	wg := publishFromWorkers(workers, each, each/3, restart, func(w, k int) {
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
	})
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

	got := promised(t, promises[:])
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

// Workers publish asynchronously through a proxy that delays every answer, so that
// acks are always on their way, when the publishing ends under them: the owner
// closes the connection (the watcher finishes what is pending while acks still
// arrive), or Close gives the pending messages up (while acks arrive and workers
// still send). Every message sent gets its promise exactly once, every permit is
// completed, and the circuits counted exactly the promises and the sends that
// failed after their permits were taken.
func TestAsyncCompletesEveryPermitOnceWhenPublishingEnds(t *testing.T) {
	cases := []struct {
		name string
		end  func(t *testing.T, e *env)
	}{
		{name: "the owner closes the connection", end: func(_ *testing.T, e *env) { e.nc.Close() }},
		{name: "Close gives the pending messages up", end: func(t *testing.T, e *env) {
			ctx, cancel := context.WithCancel(context.Background())
			cancel()
			if err := e.p.Close(ctx); !errors.Is(err, natsguard.ErrClosed) {
				t.Errorf("Close with acks pending: %v", err)
			}
		}},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			server := privateServer(t)
			proxy := harness.NewProxy(t, server.Addr())
			e := newEnv(t, "nats://"+proxy.Addr(), counting, nil)
			d, subj := newStream(t, e.js, "end", jetstream.StreamConfig{})
			proxy.SetLatency(20 * time.Millisecond)

			const workers, each = 4, 200
			var promises [workers * each]atomic.Int32
			var sent, afterPermit atomic.Int64
			var done sync.WaitGroup
			end := make(chan struct{})
			wg := publishFromWorkers(workers, each, each/2, end, func(w, k int) {
				done.Add(1)
				err := e.p.PublishAsync(context.Background(), d, transport.Message{Key: []byte(subj(fmt.Sprint(w)))},
					func(*jetstream.PubAck, error) { promises[k].Add(1); done.Done() })
				switch {
				case err == nil:
					sent.Add(1)
					return
				case !errors.Is(err, natsguard.ErrClosed):
					afterPermit.Add(1) // nats.go refused the send: the permits were taken and completed
				}
				done.Done()
			})
			<-end
			c.end(t, e)
			wg.Wait()
			done.Wait()

			got := promised(t, promises[:])
			t.Logf("%d sent, %d refused by nats.go after their permits, %d promises", sent.Load(), afterPermit.Load(), got)
			if got != sent.Load() {
				t.Errorf("%d promises for %d messages sent", got, sent.Load())
			}
			want := uint64(got + afterPermit.Load())
			for _, dest := range []transport.Destination{d, e.p.Connection()} {
				if calls := e.calls(dest); calls.Total() != want {
					t.Errorf("%s counted %+v for %d calls", dest, calls, want)
				}
			}
			e.idle(d)
		})
	}
}

// promised returns how many messages got their promise, each counted in promises,
// and reports an error for any that got more than one.
func promised(t *testing.T, promises []atomic.Int32) int64 {
	t.Helper()
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
	return got
}

// publishFromWorkers starts workers goroutines that each call publish(w, k) for k
// from w*each to w*each+each-1, and closes midway when worker 0 reaches its at-th
// message, so that the others go on publishing while the test makes its event
// happen. Wait on the group it returns.
func publishFromWorkers(workers, each, at int, midway chan<- struct{}, publish func(w, k int)) *sync.WaitGroup {
	var wg sync.WaitGroup
	for w := range workers {
		wg.Go(func() {
			for i := range each {
				if w == 0 && i == at {
					close(midway)
				}
				publish(w, w*each+i)
			}
		})
	}
	return &wg
}
