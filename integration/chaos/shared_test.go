package chaos

// Shared circuits under faults: fleets of replicas on DynamoDB (dynalite) and Redis,
// their recovery herds, ramps and probes.

import (
	"context"
	"errors"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/aws/smithy-go/middleware"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	redisstate "github.com/brokerguard/brokerguard/breaker/redis"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/transport"
	"github.com/redis/go-redis/v9"
)

// tableWatch sees every request a replica's client makes, and what the table answered:
// the failure counts that reached the threshold, and the OPENs written.
type tableWatch struct {
	threshold int64
	requests  atomic.Int64

	mu      sync.Mutex
	crossed map[uint64]bool // closed generations whose count an ADD took to the threshold
	opened  map[uint64]bool // closed generations followed by an OPEN
}

func attrN(m map[string]types.AttributeValue, name string) uint64 {
	if n, ok := m[name].(*types.AttributeValueMemberN); ok {
		v, _ := strconv.ParseUint(n.Value, 10, 64)
		return v
	}
	return 0
}

func attrStr(m map[string]types.AttributeValue, name string) string {
	if s, ok := m[name].(*types.AttributeValueMemberS); ok {
		return s.Value
	}
	return ""
}

func (w *tableWatch) install(o *dynamodb.Options) {
	o.APIOptions = append(o.APIOptions, func(s *middleware.Stack) error {
		return s.Initialize.Add(middleware.InitializeMiddlewareFunc("fleet-watch",
			func(ctx context.Context, in middleware.InitializeInput, next middleware.InitializeHandler) (middleware.InitializeOutput, middleware.Metadata, error) {
				out, md, err := next.HandleInitialize(ctx, in)
				w.requests.Add(1)
				if err != nil {
					return out, md, err
				}
				w.mu.Lock()
				defer w.mu.Unlock()
				switch p := in.Parameters.(type) {
				case *dynamodb.UpdateItemInput:
					if r, ok := out.Result.(*dynamodb.UpdateItemOutput); ok && attrStr(r.Attributes, "state") == "closed" &&
						int64(attrN(r.Attributes, "failures")) >= w.threshold {
						w.crossed[attrN(r.Attributes, "gen")] = true
					}
				case *dynamodb.PutItemInput:
					if attrStr(p.Item, "state") == "open" {
						w.opened[attrN(p.Item, "gen")-1] = true
					}
				}
				return out, md, err
			}), middleware.After)
	})
}

// A fleet, as a test: 8 replicas, each with its own SDK client, share one
// circuit on dynalite. Half the fleet fails, then all of it, then it recovers; three
// times over. Time is a fake clock advanced between rounds of concurrent calls, so the
// figures do not depend on how fast the machine is.
func TestSharedCircuitFleet(t *testing.T) {
	const (
		replicas, workers, callsPerRound = 8, 3, 3
		cycles                           = 4
		step                             = 100 * time.Millisecond
		staleness                        = 500 * time.Millisecond
	)
	endpoint := harness.Dynalite(t)
	setup := harness.DynamoDBClient(endpoint)
	table := harness.DynamoDBTable(t, setup, "chaos-fleet-")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Minute)
	defer cancel()
	policy := breaker.Policy{FailureThreshold: 3, BreakDuration: 2 * time.Second, ProbeLease: time.Second,
		HalfOpenMaxProbes: 2, Scope: breaker.SharedDependency}
	clock := fakeclock.New(time.Now())
	watch := &tableWatch{threshold: int64(policy.FailureThreshold), crossed: map[uint64]bool{}, opened: map[uint64]bool{}}
	fleet := make([]*dynamo.Circuit, replicas)
	for i := range fleet {
		client := harness.DynamoDBClient(endpoint, watch.install)
		c, err := dynamo.New(client, table, "kafka:orders", policy, sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithMaxStaleness(staleness),
			sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not turn slow answers into outages
		if err != nil {
			t.Fatal(err)
		}
		fleet[i] = c
	}

	// item reads the stored state and generation, outside the watched clients.
	item := func() (string, uint64) {
		out, err := setup.GetItem(ctx, &dynamodb.GetItemInput{TableName: aws.String(table),
			Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "kafka:orders"}}, ConsistentRead: aws.Bool(true)})
		if err != nil {
			t.Fatal(err)
		}
		return attrStr(out.Item, "state"), attrN(out.Item, "gen")
	}

	var (
		admittedWhileOpen, healthyAdmissions, healthyRequests int64
		probesNow, mostProbes                                 atomic.Int64
		unavailable                                           atomic.Int64
	)
	// round runs callsPerRound calls on every worker of every replica at one instant;
	// fails says which replicas' calls fail. It returns the calls admitted that were
	// not probes.
	round := func(fails func(replica int) bool) int64 {
		var admitted atomic.Int64
		var wg sync.WaitGroup
		for i, c := range fleet {
			for range workers {
				wg.Go(func() {
					for range callsPerRound {
						p, err := c.Acquire(ctx)
						switch {
						case errors.Is(err, breaker.ErrOpen):
							continue
						case errors.Is(err, breaker.ErrUnavailable):
							unavailable.Add(1)
							continue
						case err != nil:
							t.Error(err)
							return
						}
						if p.Probe() {
							n := probesNow.Add(1)
							for m := mostProbes.Load(); n > m && !mostProbes.CompareAndSwap(m, n); m = mostProbes.Load() {
							}
							defer probesNow.Add(-1) // held to the end of the round, as a slow probe
						} else {
							admitted.Add(1)
						}
						o := breaker.Success
						if fails(i) {
							o = breaker.Failure
						}
						if p.Probe() {
							defer p.Complete(o)
						} else {
							p.Complete(o)
						}
					}
				})
			}
		}
		wg.Wait()
		return admitted.Load()
	}
	// phase runs rounds, advancing the clock between them, and counts the calls
	// admitted in rounds during which the table said open throughout, after every
	// replica's snapshot had had MaxStaleness to see it.
	phase := func(rounds int, fails func(int) bool) {
		for range rounds {
			before, genBefore := item()
			admitted := round(fails)
			after, genAfter := item()
			if before == "open" && after == "open" && genBefore == genAfter && openedLongAgo(t, setup, table, clock.Now(), staleness) {
				admittedWhileOpen += admitted
			}
			clock.Advance(step)
		}
	}
	none := func(int) bool { return false }
	half := func(i int) bool { return i < replicas/2 }
	all := func(int) bool { return true }
	for cycle := range cycles {
		base := watch.requests.Load()
		for range 20 {
			healthyAdmissions += round(none)
			clock.Advance(step)
		}
		healthyRequests += watch.requests.Load() - base
		phase(20, half)
		phase(20, all)
		if state, _ := item(); state == "closed" {
			t.Fatalf("cycle %d: the shared circuit is closed after 2s of every call failing", cycle)
		}
		phase(60, none) // the break ends, probes succeed, the fleet closes
		if state, _ := item(); state != "closed" {
			t.Fatalf("cycle %d: the shared circuit is %s after recovery; want closed", cycle, state)
		}
	}

	watch.mu.Lock()
	lost := 0
	for gen := range watch.crossed {
		if !watch.opened[gen] {
			lost++
		}
	}
	crossings := len(watch.crossed)
	watch.mu.Unlock()
	perTenK := float64(healthyRequests) * 1e4 / float64(healthyAdmissions)
	t.Logf("shared fleet (8 replicas, 4 cycles): calls admitted while the table said open: %d; most concurrent probes: %d (HalfOpenMaxProbes %d); "+
		"threshold crossings: %d, that did not open: %d; table requests per 10k healthy admissions: %.1f (%d requests, %d admissions); refused as unavailable: %d",
		admittedWhileOpen, mostProbes.Load(), policy.HalfOpenMaxProbes, crossings, lost, perTenK, healthyRequests, healthyAdmissions, unavailable.Load())
	switch {
	case admittedWhileOpen != 0:
		t.Errorf("%d calls admitted while the table said open", admittedWhileOpen)
	case mostProbes.Load() > int64(policy.HalfOpenMaxProbes):
		t.Errorf("%d probes in flight at once; HalfOpenMaxProbes is %d", mostProbes.Load(), policy.HalfOpenMaxProbes)
	case lost != 0:
		t.Errorf("%d of %d threshold crossings did not open the circuit", lost, crossings)
	case crossings == 0:
		t.Error("no threshold crossing was seen: the test did not exercise what it measures")
	}
}

// openedLongAgo reports whether the stored OPEN was written at least staleness before
// now, so that every replica's snapshot has had time to see it.
func openedLongAgo(t *testing.T, client *dynamodb.Client, table string, now time.Time, staleness time.Duration) bool {
	t.Helper()
	out, err := client.GetItem(context.Background(), &dynamodb.GetItemInput{TableName: aws.String(table),
		Key: map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: "kafka:orders"}}, ConsistentRead: aws.Bool(true)})
	if err != nil {
		t.Fatal(err)
	}
	since := int64(attrN(out.Item, "since"))
	return since != 0 && now.UnixNano()-since >= int64(staleness)
}

// The recovery herd against one shared circuit: a fleet of replicas, all released at
// the instant the circuit may half-open, admits exactly HalfOpenMaxProbes probes.
func TestSharedCircuitHerdAdmitsExactlyMaxProbes(t *testing.T) {
	const fleet, perReplica, maxProbes = 20, 50, 3
	endpoint := harness.Dynalite(t)
	client := harness.DynamoDBClient(endpoint)
	table := harness.DynamoDBTable(t, client, "chaos-herd-")
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := fakeclock.New(time.Now())
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, HalfOpenMaxProbes: maxProbes,
		ProbeLease: time.Minute, Scope: breaker.SharedDependency}
	replicas := make([]*dynamo.Circuit, fleet)
	for i := range replicas {
		c, err := dynamo.New(client, table, "kafka:orders", policy, sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not starve the probe writes
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = c
	}
	p, err := replicas[0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("the failure did not count")
	}
	clock.Advance(10 * time.Second) // the open deadline, and every snapshot is stale

	circuits := make([]breaker.Circuit, len(replicas))
	for i, c := range replicas {
		circuits[i] = c
	}
	if probes := releaseHerd(t, ctx, circuits, perReplica); probes != maxProbes {
		t.Fatalf("the fleet admitted %d probes, want exactly HalfOpenMaxProbes = %d", probes, maxProbes)
	}
	record(result{"shared herd: 1,000 calls on 20 replicas of one DynamoDB circuit (probes admitted)", fleet * perReplica, maxProbes, 0, 0, 0})
}

// releaseHerd releases perReplica goroutines on each replica of one shared circuit at
// once, each making one Acquire, and returns how many probes were admitted. Probes are
// held, not completed: a second wave of probes would be a herd. Any admission that is
// not a probe, or an error other than a rejection or an unavailable store, fails t.
// So does a probe a replica admitted on local evidence (generation 0: the store was
// too slow and KeepLocal decided there), counted apart from the shared probes: the
// store here is reachable, so every probe must hold a lease in the shared record.
func releaseHerd(t *testing.T, ctx context.Context, replicas []breaker.Circuit, perReplica int) int {
	var probes, local, rejected, unavailable atomic.Int64
	var start sync.WaitGroup
	start.Add(1)
	var wg sync.WaitGroup
	for i, c := range replicas {
		for range perReplica {
			wg.Go(func() {
				start.Wait()
				p, err := c.Acquire(ctx)
				switch {
				case err == nil && p.Probe() && p.Generation() == 0:
					local.Add(1)
				case err == nil && p.Probe():
					probes.Add(1)
				case err == nil:
					t.Errorf("replica %d admitted a call that is not a probe", i)
				case errors.Is(err, breaker.ErrOpen):
					rejected.Add(1)
				case errors.Is(err, breaker.ErrUnavailable):
					unavailable.Add(1)
				default:
					t.Errorf("replica %d: %v", i, err)
				}
			})
		}
	}
	start.Done()
	wg.Wait()
	degraded := 0
	for _, c := range replicas {
		if !c.Snapshot().DegradedSince.IsZero() {
			degraded++
		}
	}
	t.Logf("%d goroutines: %d shared probes, %d local probes (%d replicas degraded), %d rejected, %d could not reach the store",
		len(replicas)*perReplica, probes.Load(), local.Load(), degraded, rejected.Load(), unavailable.Load())
	if local.Load() != 0 {
		t.Errorf("%d probes admitted on local evidence by %d degraded replicas; want none from a reachable store", local.Load(), degraded)
	}
	return int(probes.Load())
}

// The fleet ramps together: 8 replicas share one circuit on dynalite, and one of them
// closes it with its probe. Every replica reads the close time from the shared item,
// so the 1,000 callers of the whole fleet get the ramp's share in each 100 ms, to
// within 2 % of the full load, though 7 of the replicas never saw the probe.
func TestSharedFleetRampsTogether(t *testing.T) {
	const fleetSize, perReplica = 8, 125
	endpoint := harness.Dynalite(t)
	client := harness.DynamoDBClient(endpoint)
	table := harness.DynamoDBTable(t, client, "chaos-ramp-")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	start := time.Now()
	clock := fakeclock.New(start)
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: breakTime, ProbeLease: time.Minute,
		RampDuration: herdRamp, Scope: breaker.SharedDependency}
	fleet := make([]*dynamo.Circuit, fleetSize)
	for i := range fleet {
		c, err := dynamo.New(client, table, "kafka:orders", policy, sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithMaxStaleness(herdTick),
			sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not turn slow answers into outages
		if err != nil {
			t.Fatal(err)
		}
		fleet[i] = c
	}
	broker := &recoveringBroker{clock: clock, recovered: start.Add(breakTime), bins: make([]atomic.Int64, herdTicks)}
	p, err := fleet[0].Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	p.Complete(breaker.Failure)
	clock.Set(broker.recovered)
	probe, err := fleet[0].Acquire(ctx)
	if err != nil || !probe.Probe() || !probe.Complete(breaker.Success) {
		t.Fatalf("the probe after recovery did not close the shared circuit: %v", err)
	}

	run := herdRun{probes: 1}
	run.offered = rampTicks(t, clock, broker.recovered, fleetSize*perReplica, func(c int) error {
		p, err := fleet[c%fleetSize].Acquire(ctx)
		if err != nil {
			return err
		}
		defer p.Complete(breaker.Success)
		return broker.Publish(ctx, transport.Destination{})
	})
	run.broker = broker.counts()
	const all = fleetSize * perReplica
	report := checkRamp(t, policy, run, nil, all, all/50)
	t.Logf("shared fleet ramp, 1,000 callers on 8 replicas of one DynamoDB circuit, calls per 100 ms:\n%s", report)
	for i, c := range fleet {
		if s := c.Snapshot(); s.RampRefused == 0 {
			t.Errorf("replica %d refused nothing while the fleet ramped: %+v", i, s)
		}
	}
	record(result{"shared fleet ramp on DynamoDB, 2s: calls at the broker in the first 100ms", all, run.broker[0], 0, 0, 0})
}

// The recovery herd against one circuit shared through Redis: 20 replicas, each with
// its own client (its own connections, as separate processes would have), release
// 1,000 calls at the instant the circuit may half-open; exactly HalfOpenMaxProbes
// probes are admitted.
func TestRedisSharedCircuitHerdAdmitsExactlyMaxProbes(t *testing.T) {
	const fleet, perReplica, maxProbes = 20, 50, 3
	addr := harness.RedisAddr(t)
	prefix := harness.RedisKeyPrefix(t, addr)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	clock := fakeclock.New(time.Now())
	policy := breaker.Policy{FailureThreshold: 1, BreakDuration: 10 * time.Second, HalfOpenMaxProbes: maxProbes,
		ProbeLease: time.Minute, Scope: breaker.SharedDependency}
	replicas := make([]breaker.Circuit, fleet)
	var first *redisstate.Circuit
	for i := range replicas {
		client := redis.NewClient(&redis.Options{Addr: addr, ContextTimeoutEnabled: true})
		t.Cleanup(func() { client.Close() })
		c, err := redisstate.New(client, "kafka:orders", policy, redisstate.WithKeyPrefix(prefix), sharedstate.WithClock(clock),
			sharedstate.WithOwner("replica-"+strconv.Itoa(i)), sharedstate.WithIOTimeout(15*time.Second)) // a loaded machine must not starve the probe writes
		if err != nil {
			t.Fatal(err)
		}
		replicas[i] = c
		first = c
	}
	p, err := first.Acquire(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if !p.Complete(breaker.Failure) {
		t.Fatal("the failure did not count")
	}
	clock.Advance(10 * time.Second) // the open deadline, and every snapshot is stale
	if probes := releaseHerd(t, ctx, replicas, perReplica); probes != maxProbes {
		t.Fatalf("the fleet admitted %d probes, want exactly HalfOpenMaxProbes = %d", probes, maxProbes)
	}
	record(result{"shared herd: 1,000 calls on 20 replicas of one Redis circuit (probes admitted)", fleet * perReplica, maxProbes, 0, 0, 0})
}
