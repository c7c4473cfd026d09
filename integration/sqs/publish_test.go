package sqs_test

import (
	"bytes"
	"context"
	"errors"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/registry"
	brokersqs "github.com/brokerguard/brokerguard/sqs"
	"github.com/brokerguard/brokerguard/sqs/sqstest"
	"github.com/brokerguard/brokerguard/transport"
)

var lenient = breaker.Policy{FailureThreshold: 5, BreakDuration: time.Minute}

// receive reads n messages from the queue at url, deleting each, with all
// their attributes; it fails the test when they do not arrive in ten seconds.
func receive(t *testing.T, c *awssqs.Client, url string, n int) []types.Message {
	t.Helper()
	var got []types.Message
	deadline := time.Now().Add(10 * time.Second)
	for len(got) < n && time.Now().Before(deadline) {
		out, err := c.ReceiveMessage(context.Background(), &awssqs.ReceiveMessageInput{
			QueueUrl: &url, MaxNumberOfMessages: 10, WaitTimeSeconds: 1,
			MessageAttributeNames:       []string{"All"},
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
		})
		if err != nil {
			t.Fatalf("ReceiveMessage: %v", err)
		}
		for _, m := range out.Messages {
			got = append(got, m)
			if _, err := c.DeleteMessage(context.Background(), &awssqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
				t.Fatalf("DeleteMessage: %v", err)
			}
		}
	}
	if len(got) != n {
		t.Fatalf("received %d messages, want %d", len(got), n)
	}
	return got
}

func queueURL(t testing.TB, c *awssqs.Client, name string) string {
	t.Helper()
	out, err := c.GetQueueUrl(context.Background(), &awssqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		t.Fatal(err)
	}
	return aws.ToString(out.QueueUrl)
}

func sortedHeaders(hs []transport.Header) []transport.Header {
	hs = slices.Clone(hs)
	slices.SortFunc(hs, func(a, b transport.Header) int { return strings.Compare(a.Key, b.Key) })
	return hs
}

// Messages sent by name in a batch and by URL alone arrive with their bodies
// and headers intact, under one circuit.
func TestRoundTrip(t *testing.T) {
	e := newEnv(t)
	c := client(t, e.endpoint, nil)
	q := e.queue(t, c, "roundtrip", nil)
	url := queueURL(t, c, q)
	g := newGuard(t, c, lenient)
	ctx := context.Background()

	sent := []transport.Message{
		{Value: []byte(`{"order":1}`), Headers: []transport.Header{
			{Key: "content-type", Value: []byte("application/json")},
			{Key: "trace", Value: []byte{0xff, 0x00, 0x01}}, // not text: a Binary attribute
		}},
		{Value: []byte("order 2, ünïcödé 🚚"), Headers: []transport.Header{{Key: "tenant", Value: []byte("acme")}}},
		{Value: []byte("order 3")},
	}
	if err := g.pub.Publish(ctx, dest(q), sent...); err != nil {
		t.Fatalf("publish by name: %v", err)
	}
	last := transport.Message{Value: []byte("order 4"), Headers: []transport.Header{{Key: "n", Value: []byte("4")}}}
	if err := g.pub.Publish(ctx, dest(url), last); err != nil {
		t.Fatalf("publish by URL: %v", err)
	}
	sent = append(sent, last)

	if n := g.reg.Len(); n != 1 {
		t.Errorf("%d circuits for one queue by name and URL, want 1", n)
	}
	if s := g.snapshot(t, q); s.State != breaker.Closed || s.Failures != 0 {
		t.Errorf("circuit %v with %d failures, want closed with none", s.State, s.Failures)
	}
	got := map[string][]transport.Header{}
	for _, m := range receive(t, c, url, len(sent)) {
		got[aws.ToString(m.Body)] = brokersqs.Headers(m.MessageAttributes)
	}
	for _, m := range sent {
		hs, ok := got[string(m.Value)]
		if !ok {
			t.Errorf("message %q was not received", m.Value)
			continue
		}
		want := sortedHeaders(m.Headers)
		if !slices.EqualFunc(hs, want, func(a, b transport.Header) bool { return a.Key == b.Key && bytes.Equal(a.Value, b.Value) }) {
			t.Errorf("message %q: headers %q, want %q", m.Value, hs, want)
		}
	}
}

// A FIFO queue gets each message's group from its key and its deduplication
// ID from a header; a repeated deduplication ID is dropped by the queue.
func TestFIFORoundTrip(t *testing.T) {
	e := newEnv(t)
	c := client(t, e.endpoint, nil)
	q := e.queue(t, c, "orders.fifo", map[string]string{"FifoQueue": "true"})
	url := queueURL(t, c, q)
	g := newGuard(t, c, lenient, brokersqs.WithDeduplicationID(brokersqs.FromHeader("dedup")))
	ctx := context.Background()

	msg := func(key, dedup, body string) transport.Message {
		return transport.Message{Key: []byte(key), Value: []byte(body), Headers: []transport.Header{{Key: "dedup", Value: []byte(dedup)}}}
	}
	if err := g.pub.Publish(ctx, dest(q), msg("customer-1", "a", "first"), msg("customer-1", "b", "second")); err != nil {
		t.Fatal(err)
	}
	if err := g.pub.Publish(ctx, dest(q), msg("customer-2", "a", "duplicate of first")); err != nil {
		t.Fatal(err)
	}
	err := g.pub.Publish(ctx, dest(q), transport.Message{Value: []byte("no group")})
	if ie, ok := errors.AsType[*brokersqs.InvalidMessageError](err); !ok || ie.Index != 0 {
		t.Errorf("publish without a key to a FIFO queue: %v, want an InvalidMessageError for message 0", err)
	}

	var bodies, groups, dedups []string
	for _, m := range receive(t, c, url, 2) {
		bodies = append(bodies, aws.ToString(m.Body))
		groups = append(groups, m.Attributes["MessageGroupId"])
		dedups = append(dedups, m.Attributes["MessageDeduplicationId"])
	}
	if want := []string{"first", "second"}; !slices.Equal(bodies, want) {
		t.Errorf("received %q, want %q in order", bodies, want)
	}
	if want := []string{"customer-1", "customer-1"}; !slices.Equal(groups, want) {
		t.Errorf("groups %q, want %q", groups, want)
	}
	if want := []string{"a", "b"}; !slices.Equal(dedups, want) {
		t.Errorf("deduplication IDs %q, want %q", dedups, want)
	}
}

// Large messages are split so that no request passes SQS's payload limit.
func TestBatchesRespectThePayloadLimit(t *testing.T) {
	e := newEnv(t)
	c := client(t, e.endpoint, nil)
	q := e.queue(t, c, "large", nil)
	g := newGuard(t, c, lenient)
	ms := make([]transport.Message, 7)
	for i := range ms {
		ms[i] = transport.Message{Value: bytes.Repeat([]byte{'a' + byte(i)}, 100<<10), Headers: []transport.Header{{Key: "i", Value: []byte{'0' + byte(i)}}}}
	}
	if err := g.pub.Publish(context.Background(), dest(q), ms...); err != nil {
		t.Fatalf("publish of %d messages of 100 KiB: %v", len(ms), err)
	}
	if e.srv != nil {
		// Two per request fit in 256 KiB, three do not: 2+2+2 by batch, 1 alone.
		if n, m := e.srv.Requests(q, "SendMessageBatch"), e.srv.Requests(q, "SendMessage"); n != 3 || m != 1 {
			t.Errorf("%d SendMessageBatch and %d SendMessage requests, want 3 and 1", n, m)
		}
		if n := len(e.srv.Messages(q)); n != len(ms) {
			t.Errorf("%d messages stored, want %d", n, len(ms))
		}
	} else {
		receive(t, c, queueURL(t, c, q), len(ms))
	}
}

// A batch whose entries fail in part reports each failed message by its
// index in the Publish call; every other message is stored.
func TestBatchReportsEntryFailuresByIndex(t *testing.T) {
	e := newEnv(t)
	srv := e.faults(t)
	c := client(t, e.endpoint, nil)
	q := e.queue(t, c, "mixed", nil)
	// Window mode counts every failure, so the count shows one per request.
	g := newGuard(t, c, breaker.Policy{FailureThreshold: 100, BreakDuration: time.Minute, FailureWindow: time.Minute, MinimumCalls: 1})
	srv.SetBatchEntryFault(q, failEntries(map[int]sqstest.Fault{3: sqstest.InvalidParameterValue, 7: sqstest.InternalError}))

	ms := msgs("m", 25) // three requests: 10, 10 and 5 entries
	err := g.pub.Publish(context.Background(), dest(q), ms...)
	be, ok := errors.AsType[*transport.BatchError](err)
	if !ok {
		t.Fatalf("publish: %v, want a *transport.BatchError", err)
	}
	type failure struct {
		index  int
		code   string
		sender bool
	}
	var got []failure
	for _, f := range be.Failed {
		ee, ok := errors.AsType[*brokersqs.EntryError](f.Err)
		if !ok {
			t.Fatalf("message %d: %v, want an *EntryError", f.Index, f.Err)
		}
		got = append(got, failure{f.Index, ee.Code, ee.SenderFault})
	}
	want := []failure{{3, "InvalidParameterValue", true}, {7, "InternalError", false}, {13, "InvalidParameterValue", true}, {17, "InternalError", false}, {23, "InvalidParameterValue", true}}
	if !slices.Equal(got, want) {
		t.Errorf("failures %v, want %v", got, want)
	}
	if be.Destination != dest(q) {
		t.Errorf("batch error names %v, want %v", be.Destination, dest(q))
	}

	var stored []string
	for _, m := range srv.Messages(q) {
		stored = append(stored, m.Body)
	}
	var published []string
	for i, m := range ms {
		if !slices.ContainsFunc(want, func(f failure) bool { return f.index == i }) {
			published = append(published, string(m.Value))
		}
	}
	if !slices.Equal(stored, published) {
		t.Errorf("stored %q, want %q", stored, published)
	}
	if n := srv.Requests(q, "SendMessageBatch"); n != 3 {
		t.Errorf("%d SendMessageBatch requests, want 3", n)
	}
	// Each request was its own call: the two with a receiver fault are two failures.
	if s := g.snapshot(t, q); s.Failures != 2 || s.State != breaker.Closed {
		t.Errorf("circuit %v with %d failures, want closed with 2", s.State, s.Failures)
	}
}

// An outage opens the circuit, which then sends nothing until its break ends;
// then a single probe goes, and its success closes the circuit.
func TestOutageOpensAndOneProbeRecovers(t *testing.T) {
	e := newEnv(t)
	srv := e.faults(t)
	c := client(t, e.endpoint, nil)
	q := e.queue(t, c, "outage", nil)
	const breakFor = 10 * time.Second
	g := newGuard(t, c, breaker.Policy{FailureThreshold: 3, BreakDuration: breakFor})
	ctx := context.Background()
	one := transport.Message{Value: []byte("before")}
	if err := g.pub.Publish(ctx, dest(q), one); err != nil {
		t.Fatal(err)
	}

	srv.RefuseConnections()
	t.Cleanup(func() { _ = srv.AcceptConnections() })
	for i := range 3 {
		err := g.pub.Publish(ctx, dest(q), transport.Message{Value: []byte("during")})
		if err == nil || errors.Is(err, breaker.ErrOpen) || brokersqs.Classify(err) != breaker.Failure {
			t.Fatalf("publish %d during the outage: %v, want a Failure from the SDK", i, err)
		}
	}
	if s := g.snapshot(t, q); s.State != breaker.Open {
		t.Fatalf("circuit %v after three failures, want open", s.State)
	}

	// The queue is back, but the circuit sends nothing before its break ends.
	if err := srv.AcceptConnections(); err != nil {
		t.Fatal(err)
	}
	sends := srv.Requests(q, "SendMessage")
	err := g.pub.Publish(ctx, dest(q), transport.Message{Value: []byte("rejected")})
	var rejected *registry.RejectedError
	if !errors.As(err, &rejected) || !errors.Is(err, breaker.ErrOpen) || rejected.Destination != dest(q) {
		t.Fatalf("publish while open: %v, want a rejection naming %v", err, dest(q))
	}

	// After the break one probe goes; while it is in flight the others are refused.
	srv.SetFault(q, sqstest.Hang)
	g.clock.Advance(breakFor)
	probeCtx, cancelProbe := context.WithCancel(ctx)
	probeErr := make(chan error, 1)
	go func() { probeErr <- g.pub.Publish(probeCtx, dest(q), transport.Message{Value: []byte("held probe")}) }()
	eventually(t, "the probe reaches the server", func() bool { return srv.Requests(q, "SendMessage") == sends+1 })
	if err := g.pub.Publish(ctx, dest(q), transport.Message{Value: []byte("sibling")}); !errors.Is(err, breaker.ErrOpen) {
		t.Errorf("publish beside the probe: %v, want a rejection", err)
	}
	if n := srv.Requests(q, "SendMessage"); n != sends+1 {
		t.Errorf("%d sends reached the server while half-open, want only the probe", n-sends)
	}
	cancelProbe() // the caller gave up: a Neutral probe, the circuit stays half-open
	if err := <-probeErr; !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled probe: %v", err)
	}
	if s := g.snapshot(t, q); s.State != breaker.HalfOpen {
		t.Fatalf("circuit %v after a cancelled probe, want half-open", s.State)
	}

	srv.ClearFault(q)
	if err := g.pub.Publish(ctx, dest(q), transport.Message{Value: []byte("probe")}); err != nil {
		t.Fatalf("probe: %v", err)
	}
	if s := g.snapshot(t, q); s.State != breaker.Closed || s.Failures != 0 {
		t.Fatalf("circuit %v with %d failures after the probe, want closed with none", s.State, s.Failures)
	}
	if n := srv.Requests(q, "SendMessage"); n != sends+2 {
		t.Errorf("%d sends since the outage, want 2 (the cancelled probe and the successful one)", n-sends)
	}
	var bodies []string
	for _, m := range srv.Messages(q) {
		bodies = append(bodies, m.Body)
	}
	if want := []string{"before", "probe"}; !slices.Equal(bodies, want) {
		t.Errorf("stored %q, want %q", bodies, want)
	}
}

// A throttled queue opens its own circuit, and a queue whose request hangs
// holds only its caller: another queue's messages keep flowing.
func TestThrottledQueueNeverBlocksAnother(t *testing.T) {
	e := newEnv(t)
	srv := e.faults(t)
	c := client(t, e.endpoint, nil)
	throttled := e.queue(t, c, "throttled", nil)
	held := e.queue(t, c, "held", nil)
	healthy := e.queue(t, c, "healthy", nil)
	g := newGuard(t, c, breaker.Policy{FailureThreshold: 2, BreakDuration: time.Minute})
	ctx := context.Background()
	srv.SetFault(throttled, sqstest.RequestThrottled)
	srv.SetFault(held, sqstest.Hang)

	heldCtx, release := context.WithCancel(ctx)
	heldErr := make(chan error, 1)
	go func() {
		heldErr <- g.pub.Publish(heldCtx, dest(srv.QueueURL(held)), transport.Message{Value: []byte("held")})
	}()

	eventually(t, "the held request reaches the server", func() bool { return srv.Requests(held, "SendMessage") == 1 })
	for i := range 4 {
		err := g.pub.Publish(ctx, dest(throttled), msgs("t", 3)...)
		if i < 2 && errors.Is(err, breaker.ErrOpen) || i >= 2 && !errors.Is(err, breaker.ErrOpen) {
			t.Errorf("publish %d to the throttled queue: %v", i, err)
		}
		if err := g.pub.Publish(ctx, dest(healthy), msgs("h"+strconv.Itoa(i), 3)...); err != nil {
			t.Errorf("publish %d to the healthy queue: %v", i, err)
		}
	}
	release()
	if err := <-heldErr; !errors.Is(err, context.Canceled) {
		t.Errorf("held publish: %v", err)
	}

	if s := g.snapshot(t, throttled); s.State != breaker.Open {
		t.Errorf("throttled queue's circuit %v, want open", s.State)
	}
	for _, q := range []string{healthy, held} {
		if s := g.snapshot(t, q); s.State != breaker.Closed || s.Failures != 0 {
			t.Errorf("%s circuit %v with %d failures, want closed with none", q, s.State, s.Failures)
		}
	}
	if n := len(srv.Messages(healthy)); n != 12 {
		t.Errorf("%d messages in the healthy queue, want 12", n)
	}
	// The throttled queue saw one GetQueueUrl per failed call, nothing once open.
	if n := srv.Requests(throttled, "GetQueueUrl") + srv.Requests(throttled, "SendMessageBatch"); n != 2 {
		t.Errorf("%d requests reached the throttled queue, want 2", n)
	}
}
