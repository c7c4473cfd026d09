package dynamo

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb/types"
	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/dynamo"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/internal/harness"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// replicas returns n circuits for one identity on e's table, sharing clk (the network
// is real; time is not, so nothing here depends on how fast dynalite answers).
func replicas(t *testing.T, e env, clk *fakeclock.Clock, n int) []*dynamo.Circuit {
	t.Helper()
	var rs []*dynamo.Circuit
	for i := range n {
		rs = append(rs, newCircuit(t, e, sharedPolicy(), sharedstate.WithClock(clk), sharedstate.WithOwner("replica-"+strconv.Itoa(i))))
	}
	return rs
}

func acquire(t *testing.T, c *dynamo.Circuit) breaker.Permit {
	t.Helper()
	p, err := c.Acquire(t.Context())
	if err != nil {
		t.Fatalf("%s: Acquire: %v; want a permit", c.Owner(), err)
	}
	return p
}

func reject(t *testing.T, c *dynamo.Circuit) *breaker.OpenError {
	t.Helper()
	_, err := c.Acquire(t.Context())
	var oe *breaker.OpenError
	if !errors.As(err, &oe) || !errors.Is(err, breaker.ErrOpen) || oe.Scope != breaker.SharedDependency || oe.Identity != identity {
		t.Fatalf("%s: Acquire = %v; want a shared *OpenError for %s", c.Owner(), err, identity)
	}
	return oe
}

// openShared records the threshold's 3 failures, spread over the replicas in turn, and
// returns the open deadline.
func openShared(t *testing.T, clk *fakeclock.Clock, rs []*dynamo.Circuit) time.Time {
	t.Helper()
	for i := range sharedPolicy().FailureThreshold {
		c := rs[i%len(rs)]
		if !acquire(t, c).Complete(breaker.Failure) {
			t.Fatalf("%s: Complete(Failure) = false", c.Owner())
		}
	}
	clk.Advance(time.Second) // MaxStaleness (the default)
	deadline := reject(t, rs[0]).NotBefore
	for _, c := range rs[1:] {
		if nb := reject(t, c).NotBefore; !nb.Equal(deadline) {
			t.Fatalf("%s: NotBefore %v; want the shared deadline %v", c.Owner(), nb, deadline)
		}
	}
	return deadline
}

func TestThreeReplicasShareOneCircuit(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	rs := replicas(t, e, clk, 3)
	deadline := openShared(t, clk, rs)
	if want := clk.Now().Add(-time.Second).Add(10 * time.Second); !deadline.Equal(want) {
		t.Fatalf("open deadline %v; want %v (BreakDuration after the third failure)", deadline, want)
	}
	clk.Set(deadline)

	// Every replica asks at once: the conditional writes let exactly one through.
	var (
		wg     sync.WaitGroup
		mu     sync.Mutex
		probes []breaker.Permit
		errs   []error
	)
	for _, c := range rs {
		wg.Go(func() {
			p, err := c.Acquire(context.Background())
			mu.Lock()
			defer mu.Unlock()
			if err == nil {
				probes = append(probes, p)
			} else {
				errs = append(errs, err)
			}
		})
	}
	wg.Wait()
	if len(probes) != 1 || !probes[0].Probe() {
		t.Fatalf("%d probes across three replicas (errors %v); want exactly one", len(probes), errs)
	}
	for _, err := range errs {
		var oe *breaker.OpenError
		if !errors.As(err, &oe) || !oe.NotBefore.Equal(deadline.Add(5*time.Second)) {
			t.Fatalf("sibling rejection %v; want NotBefore = the lease expiry %v", err, deadline.Add(5*time.Second))
		}
	}
	if got := attrS(t, rawItem(t, e), "state"); got != "half-open" {
		t.Fatalf("stored state %q; want half-open", got)
	}

	if !probes[0].Complete(breaker.Success) {
		t.Fatal("probe Complete(Success) = false; want true")
	}
	clk.Advance(time.Second) // within MaxStaleness every replica admits again
	for _, c := range rs {
		if !acquire(t, c).Complete(breaker.Success) {
			t.Fatalf("%s: Complete(Success) after closing = false", c.Owner())
		}
		if s := c.Snapshot(); s.State != breaker.Closed || s.Failures != 0 {
			t.Fatalf("%s: Snapshot %+v; want closed with no failures", c.Owner(), s)
		}
	}
}

func TestLeaseTakeoverAfterTheHolderDisappears(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	rs := replicas(t, e, clk, 2)
	clk.Set(openShared(t, clk, rs))
	lost := acquire(t, rs[0]) // replica-0 takes the probe and is never heard from again
	if !lost.Probe() {
		t.Fatal("first permit after the break is not a probe")
	}
	reject(t, rs[1])
	clk.Advance(5 * time.Second) // ProbeLease
	taken := acquire(t, rs[1])
	if !taken.Probe() {
		t.Fatal("takeover permit is not a probe")
	}
	leases := rawItem(t, e)["leases"].(*types.AttributeValueMemberL).Value
	if len(leases) != 1 || attrS(t, leases[0].(*types.AttributeValueMemberM).Value, "owner") != "replica-1" {
		t.Fatalf("stored leases %#v; want one lease owned by replica-1", leases)
	}
	if !taken.Complete(breaker.Success) {
		t.Fatal("takeover probe Complete(Success) = false; want true")
	}
	if got := attrS(t, rawItem(t, e), "state"); got != "closed" {
		t.Fatalf("stored state %q; want closed", got)
	}
}

func TestStaleGenerationCompletionIsIgnored(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	rs := replicas(t, e, clk, 3)
	late := acquire(t, rs[0]) // admitted while closed
	clk.Set(openShared(t, clk, rs))
	old := acquire(t, rs[1]) // the probe of this half-open generation
	clk.Advance(5 * time.Second)
	if newer := acquire(t, rs[2]); !newer.Complete(breaker.Failure) { // takeover fails: open again
		t.Fatal("takeover probe Complete(Failure) = false; want true")
	}
	before := rawItem(t, e)
	if late.Complete(breaker.Failure) {
		t.Fatal("Complete of a permit admitted while closed = true; want false")
	}
	if old.Complete(breaker.Success) {
		t.Fatal("Complete of an older generation's probe = true; want false")
	}
	after := rawItem(t, e)
	for _, a := range []string{"ver", "state", "gen"} {
		if attrS(t, before, a) != attrS(t, after, a) {
			t.Fatalf("late completions changed %s: %s -> %s", a, attrS(t, before, a), attrS(t, after, a))
		}
	}
	if got := attrS(t, after, "state"); got != "open" {
		t.Fatalf("stored state %q; want open", got)
	}
}

func TestFingerprintMismatchIsRefused(t *testing.T) {
	e := setup(t)
	a := newCircuit(t, e, sharedPolicy())
	if err := a.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	other := sharedPolicy()
	other.BreakDuration = time.Minute
	b := newCircuit(t, e, other)
	_, err := b.Acquire(t.Context())
	var pm *sharedstate.PolicyMismatchError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.Is(err, dynamo.ErrFingerprintMismatch) || !errors.As(err, &pm) {
		t.Fatalf("Acquire with another policy = %v; want a fingerprint mismatch (ErrUnavailable)", err)
	}
	if len(pm.Fields) == 0 || !strings.HasPrefix(pm.Fields[0], "BreakDuration: stored 10s, ours 1m0s") {
		t.Fatalf("error %q; want BreakDuration named as the difference", err)
	}
	if want, _ := sharedstate.Fingerprint(sharedPolicy()); attrS(t, rawItem(t, e), "fp") != want {
		t.Fatalf("stored fingerprint changed; want the first policy's")
	}
}

func TestCorruptItemFailsClosed(t *testing.T) {
	e := setup(t)
	c := newCircuit(t, e, sharedPolicy())
	if err := c.Refresh(t.Context()); err != nil {
		t.Fatal(err)
	}
	_, err := e.client.UpdateItem(t.Context(), &dynamodb.UpdateItemInput{
		TableName:                 aws.String(e.table),
		Key:                       map[string]types.AttributeValue{"id": &types.AttributeValueMemberS{Value: identity}},
		UpdateExpression:          aws.String("SET #s = :s"),
		ExpressionAttributeNames:  map[string]string{"#s": "state"},
		ExpressionAttributeValues: map[string]types.AttributeValue{":s": &types.AttributeValueMemberS{Value: "sideways"}},
	})
	if err != nil {
		t.Fatal(err)
	}
	c = newCircuit(t, e, sharedPolicy()) // a replica starting now
	_, err = c.Acquire(t.Context())
	var ie *dynamo.ItemError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.As(err, &ie) || ie.Field != "state" || ie.Identity != identity {
		t.Fatalf("Acquire on a corrupt item = %v; want an *ItemError naming %s and state", err, identity)
	}
}

func TestSteadyStateMakesNoDynamoDBCalls(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	c := newCircuit(t, e, sharedPolicy(), sharedstate.WithClock(clk))
	acquire(t, c).Complete(breaker.Success)
	base := e.calls.total()
	for range 10_000 {
		acquire(t, c).Complete(breaker.Success)
	}
	if got := e.calls.total() - base; got != 0 {
		t.Fatalf("10,000 healthy admissions sent %d DynamoDB requests; want 0", got)
	}
	clk.Advance(750 * time.Millisecond) // three quarters of MaxStaleness
	for range 10_000 {
		acquire(t, c).Complete(breaker.Success)
	}
	if got, gets := e.calls.total()-base, e.calls.total("GetItem"); got != 1 || gets != 2 {
		t.Fatalf("%d requests after the snapshot aged (%d GetItem in all); want exactly one refresh", got, gets)
	}
}

func TestDynaliteStoppedThenStarted(t *testing.T) {
	server := harness.NewDynalite(t)
	client, counter := newClient(server.Endpoint())
	e := env{client: client, calls: counter, table: tableFor(t, client)}
	clk := fakeclock.New(time.Now())
	c := newCircuit(t, e, sharedPolicy(), sharedstate.WithClock(clk))
	acquire(t, c).Complete(breaker.Success)

	if err := server.Stop(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(800 * time.Millisecond) // the refresh fails; the snapshot is still fresh
	for range 100 {
		acquire(t, c).Complete(breaker.Success)
	}
	clk.Advance(200 * time.Millisecond) // stale: protection is unavailable, not local
	_, err := c.Acquire(t.Context())
	var ue *dynamo.UnavailableError
	if !errors.Is(err, breaker.ErrUnavailable) || !errors.As(err, &ue) || ue.Table != e.table || ue.Identity != identity {
		t.Fatalf("Acquire with a stale snapshot and no table = %v; want an *UnavailableError naming %s", err, e.table)
	}
	clk.Advance(time.Second) // RetryDelay: the next call tries the table again
	if _, err := c.Acquire(t.Context()); !errors.Is(err, breaker.ErrUnavailable) {
		t.Fatalf("Acquire while still stopped = %v; want ErrUnavailable", err)
	}

	if err := server.Start(); err != nil {
		t.Fatal(err)
	}
	clk.Advance(time.Second)
	if !acquire(t, c).Complete(breaker.Failure) {
		t.Fatal("Complete(Failure) after recovery = false; want it recorded")
	}
	if got := attrS(t, rawItem(t, e), "failures"); got != "1" {
		t.Fatalf("stored failures %s; want 1", got)
	}
}

// publisherFunc adapts a function to transport.Publisher.
type publisherFunc func(context.Context, transport.Destination, ...transport.Message) error

func (f publisherFunc) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	return f(ctx, d, msgs...)
}

func TestRegistryMixesLocalAndSharedCircuits(t *testing.T) {
	e := setup(t)
	clk := fakeclock.New(time.Now())
	local := sharedPolicy()
	local.Scope = breaker.LocalProcess
	reg, err := registry.New(registry.Policy{Circuit: sharedPolicy()},
		registry.WithOverride("kafka:audit", registry.Policy{Circuit: local}),
		registry.WithCircuitFactory(breaker.SharedDependency,
			dynamo.Factory(e.client, e.table, sharedstate.WithIdentityPrefix("billing/"), sharedstate.WithClock(clk))))
	if err != nil {
		t.Fatal(err)
	}
	down := errors.New("broker down")
	pub := reg.Guard(publisherFunc(func(context.Context, transport.Destination, ...transport.Message) error { return down }), nil)
	orders := transport.Destination{Broker: "kafka", Name: "orders"}
	for range 3 {
		if err := pub.Publish(t.Context(), orders, transport.Message{Value: []byte("o")}); !errors.Is(err, down) {
			t.Fatalf("Publish = %v; want the broker's error", err)
		}
	}
	var rejected *registry.RejectedError
	if err := pub.Publish(t.Context(), orders, transport.Message{Value: []byte("o")}); !errors.As(err, &rejected) || !errors.Is(err, breaker.ErrOpen) {
		t.Fatalf("Publish after 3 failures = %v; want a shared open rejection", err)
	}
	snaps := reg.Snapshots()
	if s := snaps[orders]; s.Scope != breaker.SharedDependency || s.Identity != "billing/kafka:orders" || s.State != breaker.Open {
		t.Fatalf("orders snapshot %+v; want the shared circuit billing/kafka:orders, open", s)
	}
	audit, err := reg.Circuit(transport.Destination{Broker: "kafka", Name: "audit"})
	if err != nil {
		t.Fatal(err)
	}
	if s := audit.Snapshot(); s.Scope != breaker.LocalProcess {
		t.Fatalf("audit circuit scope %v; want a local circuit", s.Scope)
	}
	if err := dynamo.CreateTable(t.Context(), e.client, e.table); err != nil {
		t.Fatalf("CreateTable on an existing table = %v; want nil", err)
	}
}

// On dynalite, one failure followed by 64 concurrent successes sends one
// UpdateItem and no GetItem.
func TestBurstOfSuccessesSendsOneUpdate(t *testing.T) {
	e := setup(t)
	c := newCircuit(t, e, sharedPolicy())
	if !acquire(t, c).Complete(breaker.Failure) {
		t.Fatal("the failure did not count")
	}
	permits := make([]breaker.Permit, 64)
	for i := range permits {
		permits[i] = acquire(t, c)
	}
	updates, gets := e.calls.total("UpdateItem"), e.calls.total("GetItem")
	var wg sync.WaitGroup
	for _, p := range permits {
		wg.Go(func() {
			if !p.Complete(breaker.Success) {
				t.Error("Complete(Success) = false; want true")
			}
		})
	}
	wg.Wait()
	if u, g := e.calls.total("UpdateItem")-updates, e.calls.total("GetItem")-gets; u != 1 || g != 0 {
		t.Fatalf("64 concurrent successes sent %d UpdateItem and %d GetItem; want 1 and 0", u, g)
	}
	if got := attrS(t, rawItem(t, e), "failures"); got != "0" {
		t.Fatalf("stored failures %s; want 0", got)
	}
}
