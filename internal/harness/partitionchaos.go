package harness

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kfake"
)

// deadBroker is the faults of a partition outage scenario: one broker of a
// three-broker kfake cluster first black-holed, then refusing connections.
type deadBroker struct {
	Faults *BrokerFaults
	Node   int
	// Dead lists, by partition, whether its leader is the faulted node.
	Dead []bool
}

// partitionDeadline is the callers' deadline in a partition outage scenario, and the
// bound its clients put on one request: it ends a hung broker's calls, and must not
// end a healthy one's. 500ms did, on a loaded machine under -race: healthy
// partitions missed it five times in a row and were isolated, the topic's circuit
// once opened.
const partitionDeadline = 2 * time.Second

// partitionPhase is how long each phase of the short scenario runs: with calls to
// the hung broker ending only after partitionDeadline, the dead partitions are
// isolated some 2-4 s in, and the phase must go on long enough after that to show it.
const partitionPhase = 6 * time.Second

// partitionLoad is the load of a partition outage scenario: Callers goroutines each
// publishing one message per call with a Deadline, keyed (Keys, spread over the
// partitions) or, one call in UnkeyedEvery, unkeyed.
type partitionLoad struct {
	Callers      int
	Deadline     time.Duration
	UnkeyedEvery int
	Keys         [][]byte
	// PartitionOf is the partition the client's partitioner gives a key.
	PartitionOf func(key []byte) int
	// IsRefusal says whether a publish error is the breaker's own refusal (made
	// without reaching the broker).
	IsRefusal func(error) bool
}

// Keys returns n distinct keys.
func Keys(n int) [][]byte {
	out := make([][]byte, n)
	for i := range out {
		out[i] = []byte("key-" + strconv.Itoa(i))
	}
	return out
}

// phaseCounts is what one phase of a partition outage scenario measured.
type phaseCounts struct {
	Healthy, HealthyOK int64 // keyed calls to partitions the fault spares, and the ones published
	Dead, DeadRefused  int64 // keyed calls to the dead broker's partitions, and the ones refused
	DeadReached        int64 // dead calls not refused after the first refusal: they reached the broker
	Unkeyed, UnkeyedOK int64
	Elapsed            time.Duration
	// UnkeyedAfter and UnkeyedAfterOK count the unkeyed calls started once every
	// dead partition had refused a call (was isolated).
	UnkeyedAfter, UnkeyedAfterOK int64
	firstRefusal                 atomic.Bool   // every dead partition has refused a call
	refusedParts                 atomic.Uint64 // the dead partitions that refused a call, by bit
	healthyOK, deadRef           atomic.Int64
}

// Goodput is the healthy partitions' published calls per second.
func (c *phaseCounts) Goodput() float64 { return float64(c.HealthyOK) / c.Elapsed.Seconds() }

// HealthyDelivered is the share of the keyed calls to healthy partitions published.
// Unlike Goodput it does not depend on how fast the machine was during the phase.
func (c *phaseCounts) HealthyDelivered() float64 { return pct(c.HealthyOK, c.Healthy) / 100 }

// runPartitionPhase runs load against publish for d while dead's fault is f, and
// returns the counts.
func runPartitionPhase(load partitionLoad, dead deadBroker, f BrokerFault, d time.Duration, publish func(ctx context.Context, key []byte) error) *phaseCounts {
	dead.Faults.Set(dead.Node, f)
	var c phaseCounts
	var deadMask uint64
	for p, isDead := range dead.Dead {
		if isDead {
			deadMask |= 1 << p
		}
	}
	var healthy, dd, unkeyed, unkeyedOK, reached, ua, uaOK atomic.Int64
	start := time.Now()
	end := start.Add(d)
	var wg sync.WaitGroup
	for g := range load.Callers {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; time.Now().Before(end); i++ {
				var key []byte
				if load.UnkeyedEvery == 0 || i%load.UnkeyedEvery != 0 {
					key = load.Keys[rng.IntN(len(load.Keys))]
				}
				after := c.firstRefusal.Load()
				ctx, cancel := context.WithTimeout(context.Background(), load.Deadline)
				err := publish(ctx, key)
				cancel()
				switch {
				case key == nil:
					unkeyed.Add(1)
					if err == nil {
						unkeyedOK.Add(1)
					}
					if after {
						ua.Add(1)
						if err == nil {
							uaOK.Add(1)
						}
					}
				case dead.Dead[load.PartitionOf(key)]:
					dd.Add(1)
					switch {
					case err != nil && load.IsRefusal(err):
						c.deadRef.Add(1)
						if c.refusedParts.Or(1<<load.PartitionOf(key))|1<<load.PartitionOf(key) == deadMask {
							c.firstRefusal.Store(true)
						}
					case after:
						reached.Add(1)
					}
				default:
					healthy.Add(1)
					if err == nil {
						c.healthyOK.Add(1)
					}
				}
			}
		})
	}
	wg.Wait()
	c.Elapsed = time.Since(start)
	c.Healthy, c.HealthyOK = healthy.Load(), c.healthyOK.Load()
	c.Dead, c.DeadRefused, c.DeadReached = dd.Load(), c.deadRef.Load(), reached.Load()
	c.Unkeyed, c.UnkeyedOK = unkeyed.Load(), unkeyedOK.Load()
	c.UnkeyedAfter, c.UnkeyedAfterOK = ua.Load(), uaOK.Load()
	return &c
}

// partitionRow is one set-up's line of a partition outage table.
type partitionRow struct {
	Setup                  string
	NoFault, Hung, Refused *phaseCounts // nil for a phase that did not run
}

// printPartitionTable writes the summary table of a partition outage scenario, the
// goodputs as ratios against the first row (the run without a breaker).
func printPartitionTable(w io.Writer, client string, rows []partitionRow) {
	fmt.Fprintf(w, "\n%s, one broker of three down (hung, then refusing):\n", client)
	fmt.Fprintf(w, "| set-up | hung: healthy goodput vs none | dead calls refused / reached after isolation | unkeyed delivered (after isolation) | refusing: healthy goodput vs none | refused / reached | unkeyed delivered (after isolation) |\n|---|---|---|---|---|---|---|\n")
	cells := func(c, none *phaseCounts) string {
		if c == nil {
			return " - | - | - |"
		}
		return fmt.Sprintf(" %.1f/s (%.2fx) | %d / %d | %.1f%% (%.1f%%) |", c.Goodput(), c.Goodput()/none.Goodput(),
			c.DeadRefused, c.DeadReached, pct(c.UnkeyedOK, c.Unkeyed), pct(c.UnkeyedAfterOK, c.UnkeyedAfter))
	}
	for _, r := range rows {
		fmt.Fprintf(w, "| %s |%s%s\n", r.Setup, cells(r.Hung, rows[0].Hung), cells(r.Refused, rows[0].Refused))
	}
}

// UnkeyedDelivered is the share of unkeyed calls published, of those started after
// the dead partitions were isolated when there were any, else of all.
func (c *phaseCounts) UnkeyedDelivered() float64 {
	if c.UnkeyedAfter > 0 {
		return pct(c.UnkeyedAfterOK, c.UnkeyedAfter) / 100
	}
	return pct(c.UnkeyedOK, c.Unkeyed) / 100
}

func pct(a, b int64) float64 {
	if b == 0 {
		return 100
	}
	return 100 * float64(a) / float64(b)
}

// errNoDeadPartition is returned by deadPartitions when the node leads none.
var errNoDeadPartition = errors.New("harness: the faulted node leads no partition")

// deadPartitions lists, by partition, whether leader(p) is node.
func deadPartitions(n, node int, leader func(p int32) int32) ([]bool, error) {
	out := make([]bool, n)
	any := false
	for p := range n {
		out[p] = int(leader(int32(p))) == node
		any = any || out[p]
	}
	if !any {
		return nil, errNoDeadPartition
	}
	return out, nil
}

// checkPartitionRows fails t unless the guarded row meets the targets against the
// row without a breaker: the healthy partitions' calls delivered as often (within
// 2 points) in both phases, some calls to the dead partitions refused, >= 99% of
// the unkeyed calls after isolation delivered, and no more calls reaching the dead
// broker after isolation than there are callers (the calls in flight when it was
// isolated; probes come after the isolation, longer than these phases).
//
// Goodput (calls per second) is printed, not checked: two phases run one after the
// other on a shared machine differ by far more than a breaker's cost (the refusing
// phase, where both set-ups do the same work, gave 0.31x to 9.2x on a loaded
// machine). A breaker that costs the healthy partitions refuses or fails their
// calls, which the delivered share shows whatever the machine's speed.
func checkPartitionRows(t testing.TB, none, guarded partitionRow, callers int) {
	t.Helper()
	for _, ph := range []struct {
		name       string
		none, with *phaseCounts
	}{{"hung", none.Hung, guarded.Hung}, {"refusing", none.Refused, guarded.Refused}} {
		if ph.with == nil || ph.none == nil { // the phase did not run (-short)
			continue
		}
		if with, none := ph.with.HealthyDelivered(), ph.none.HealthyDelivered(); with < none-0.02 {
			t.Errorf("%s: %.1f%% of the healthy partitions' calls delivered, %.1f%% without a breaker", ph.name, 100*with, 100*none)
		}
		if ph.with.DeadRefused == 0 {
			t.Errorf("%s: no call to the dead broker's partitions was refused", ph.name)
		}
		if got := ph.with.UnkeyedDelivered(); got < 0.99 {
			t.Errorf("%s: %.1f%% of the unkeyed calls after isolation delivered, want >= 99%%", ph.name, 100*got)
		}
	}
	var reached int64
	for _, c := range []*phaseCounts{guarded.Hung, guarded.Refused} {
		if c != nil {
			reached += c.DeadReached
		}
	}
	if n := reached; n > int64(callers) {
		t.Errorf("%d calls reached the dead broker after isolation, want <= %d", n, callers)
	}
}

// PartitionTopic creates topic on cluster with parts partitions led in turn by the
// three brokers (partition p by node p%3), and returns which partitions node leads.
func PartitionTopic(t testing.TB, cluster *kfake.Cluster, topic string, parts, node int) []bool {
	t.Helper()
	if err := cluster.CreateTopic(topic, int32(parts), nil); err != nil {
		t.Fatal(err)
	}
	for p := range int32(parts) {
		if err := cluster.MoveTopicPartition(topic, p, p%3); err != nil {
			t.Fatal(err)
		}
	}
	dead, err := deadPartitions(parts, node, func(p int32) int32 { return cluster.LeaderFor(topic, p) })
	if err != nil {
		t.Fatal(err)
	}
	return dead
}

// partitionSetup is one set-up of a partition outage scenario: Publish returns the
// function that publishes one message with key to topic.
type partitionSetup struct {
	Name    string
	Publish func(topic string) func(ctx context.Context, key []byte) error
}
