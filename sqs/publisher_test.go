package sqs

import (
	"context"
	"errors"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/internal/fakeclock"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// fakeAPI records requests and answers them with its hooks; a nil hook
// accepts everything.
type fakeAPI struct {
	mu       sync.Mutex
	singles  []*awssqs.SendMessageInput
	batches  []*awssqs.SendMessageBatchInput
	lookups  []string
	send     func(*awssqs.SendMessageInput) error
	batch    func(*awssqs.SendMessageBatchInput) (*awssqs.SendMessageBatchOutput, error)
	getQueue func(name string) (string, error)
}

func (f *fakeAPI) SendMessage(_ context.Context, in *awssqs.SendMessageInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error) {
	f.mu.Lock()
	f.singles = append(f.singles, in)
	f.mu.Unlock()
	if f.send != nil {
		if err := f.send(in); err != nil {
			return nil, err
		}
	}
	return &awssqs.SendMessageOutput{MessageId: aws.String("id")}, nil
}

func (f *fakeAPI) SendMessageBatch(_ context.Context, in *awssqs.SendMessageBatchInput, _ ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error) {
	f.mu.Lock()
	// The publisher reuses its entries' Ids; keep a copy of what was sent.
	cp := *in
	cp.Entries = slices.Clone(in.Entries)
	f.batches = append(f.batches, &cp)
	f.mu.Unlock()
	if f.batch != nil {
		return f.batch(in)
	}
	return allSucceed(in), nil
}

func (f *fakeAPI) GetQueueUrl(_ context.Context, in *awssqs.GetQueueUrlInput, _ ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error) {
	name := aws.ToString(in.QueueName)
	f.mu.Lock()
	f.lookups = append(f.lookups, name)
	f.mu.Unlock()
	if f.getQueue != nil {
		u, err := f.getQueue(name)
		if err != nil {
			return nil, err
		}
		return &awssqs.GetQueueUrlOutput{QueueUrl: &u}, nil
	}
	return &awssqs.GetQueueUrlOutput{QueueUrl: aws.String("https://sqs.test/000000000000/" + name)}, nil
}

func allSucceed(in *awssqs.SendMessageBatchInput) *awssqs.SendMessageBatchOutput {
	out := &awssqs.SendMessageBatchOutput{}
	for _, e := range in.Entries {
		out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
	}
	return out
}

func newTestPublisher(t *testing.T, api API, p breaker.Policy, opts ...Option) (*Publisher, *registry.Registry, *fakeclock.Clock) {
	t.Helper()
	clock := fakeclock.New(time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC))
	reg, err := registry.New(registry.Policy{Circuit: p}, registry.WithClock(clock))
	if err != nil {
		t.Fatal(err)
	}
	pub, err := NewPublisher(api, reg, opts...)
	if err != nil {
		t.Fatal(err)
	}
	return pub, reg, clock
}

var (
	loose   = breaker.Policy{FailureThreshold: 100, BreakDuration: time.Minute}
	orders  = transport.Destination{Broker: Broker, Name: "orders"}
	ordersF = transport.Destination{Broker: Broker, Name: "orders.fifo"}
)

func bodies(n int, size int) []transport.Message {
	ms := make([]transport.Message, n)
	for i := range ms {
		ms[i] = transport.Message{Value: []byte(strings.Repeat(string(rune('a'+i%26)), size))}
	}
	return ms
}

func snapshot(t *testing.T, reg *registry.Registry, d transport.Destination) breaker.Snapshot {
	t.Helper()
	c, err := reg.Circuit(d)
	if err != nil {
		t.Fatal(err)
	}
	return c.Snapshot()
}

func TestChunkEnd(t *testing.T) {
	for _, tc := range []struct {
		name  string
		sizes []int
		max   int
		ends  []int
	}{
		{"ten per request", slices.Repeat([]int{1}, 25), 100, []int{10, 20, 25}},
		{"bytes bound", []int{40, 40, 40, 40}, 100, []int{2, 4}},
		{"exactly the limit", []int{50, 50, 1}, 100, []int{2, 3}},
		{"an oversized message goes alone", []int{10, 200, 10}, 100, []int{1, 2, 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var ends []int
			for start := 0; start < len(tc.sizes); {
				start = chunkEnd(tc.sizes, start, tc.max)
				ends = append(ends, start)
			}
			if !slices.Equal(ends, tc.ends) {
				t.Errorf("chunk ends %v, want %v", ends, tc.ends)
			}
		})
	}
}

func TestPublishSplitsIntoBatches(t *testing.T) {
	api := &fakeAPI{}
	pub, reg, _ := newTestPublisher(t, api, loose)
	if err := pub.Publish(context.Background(), orders, bodies(21, 10)...); err != nil {
		t.Fatal(err)
	}
	if len(api.batches) != 2 || len(api.singles) != 1 {
		t.Fatalf("%d batches and %d single sends, want 2 and 1", len(api.batches), len(api.singles))
	}
	for _, b := range api.batches {
		var ids []string
		for _, e := range b.Entries {
			ids = append(ids, aws.ToString(e.Id))
		}
		if want := entryIDs[:]; !slices.Equal(ids, want) {
			t.Errorf("entry Ids %v, want %v", ids, want)
		}
		if aws.ToString(b.QueueUrl) != "https://sqs.test/000000000000/orders" {
			t.Errorf("queue URL %q", aws.ToString(b.QueueUrl))
		}
	}
	if got := aws.ToString(api.singles[0].MessageBody); got != strings.Repeat("u", 10) {
		t.Errorf("the 21st message went as %q", got)
	}
	// The URL was looked up once and cached.
	if err := pub.Publish(context.Background(), orders, bodies(1, 1)...); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(api.lookups, []string{"orders"}) {
		t.Errorf("GetQueueUrl calls %v, want one for orders", api.lookups)
	}
	if s := snapshot(t, reg, orders); s.State != breaker.Closed || s.InFlight != 0 {
		t.Errorf("circuit %v with %d in flight, want closed with none", s.State, s.InFlight)
	}
}

func TestPublishMapsEntryResultsToMessageIndexes(t *testing.T) {
	api := &fakeAPI{batch: func(in *awssqs.SendMessageBatchInput) (*awssqs.SendMessageBatchOutput, error) {
		out := &awssqs.SendMessageBatchOutput{}
		for _, e := range in.Entries {
			switch aws.ToString(e.Id) {
			case "1":
				out.Failed = append(out.Failed, types.BatchResultErrorEntry{Id: e.Id, Code: aws.String("InvalidParameterValue"), SenderFault: true})
			case "2": // neither successful nor failed
			default:
				out.Successful = append(out.Successful, types.SendMessageBatchResultEntry{Id: e.Id})
			}
		}
		return out, nil
	}}
	pub, reg, _ := newTestPublisher(t, api, loose)
	err := pub.Publish(context.Background(), orders, bodies(13, 1)...)
	be, ok := errors.AsType[*transport.BatchError](err)
	if !ok {
		t.Fatalf("publish: %v, want a batch error", err)
	}
	var idx []int
	for _, f := range be.Failed {
		idx = append(idx, f.Index)
	}
	if want := []int{1, 2, 11, 12}; !slices.Equal(idx, want) {
		t.Fatalf("failed indexes %v, want %v", idx, want)
	}
	for _, f := range be.Failed {
		ee, isEntry := errors.AsType[*EntryError](f.Err)
		switch f.Index % 10 {
		case 1:
			if !isEntry || !ee.SenderFault || ee.Code != "InvalidParameterValue" {
				t.Errorf("message %d: %v, want the entry's error", f.Index, f.Err)
			}
		case 2:
			if !errors.Is(f.Err, ErrMissingResult) {
				t.Errorf("message %d: %v, want ErrMissingResult", f.Index, f.Err)
			}
		}
	}
	// Both requests had an entry whose fate is unknown: two failures.
	if s := snapshot(t, reg, orders); s.Failures != 2 {
		t.Errorf("%d failures, want 2", s.Failures)
	}
}

func TestCircuitOpeningMidPublishStopsTheRest(t *testing.T) {
	boom := &types.KmsThrottled{Message: aws.String("slow down")}
	api := &fakeAPI{batch: func(*awssqs.SendMessageBatchInput) (*awssqs.SendMessageBatchOutput, error) { return nil, boom }}
	pub, reg, _ := newTestPublisher(t, api, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute})
	err := pub.Publish(context.Background(), orders, bodies(30, 1)...)
	be, ok := errors.AsType[*transport.BatchError](err)
	if !ok || len(be.Failed) != 30 {
		t.Fatalf("publish: %v, want all 30 messages failed", err)
	}
	for _, f := range be.Failed {
		want := f.Index >= 10 // the first request failed, the circuit refused the rest
		if got := errors.Is(f.Err, breaker.ErrOpen); got != want {
			t.Errorf("message %d: %v", f.Index, f.Err)
		}
	}
	if len(api.batches) != 1 {
		t.Errorf("%d requests, want 1", len(api.batches))
	}
	// Now open: nothing is sent, and the rejection comes back as it is.
	err = pub.Publish(context.Background(), orders, bodies(30, 1)...)
	if _, ok := errors.AsType[*registry.RejectedError](err); !ok {
		t.Errorf("publish to an open circuit: %v, want a *registry.RejectedError", err)
	}
	if _, ok := err.(*registry.RejectedError); !ok {
		t.Errorf("publish to an open circuit returned %T, want the rejection itself", err)
	}
	if s := snapshot(t, reg, orders); s.State != breaker.Open || s.InFlight != 0 {
		t.Errorf("circuit %v with %d in flight", s.State, s.InFlight)
	}
}

func TestSingleRequestErrorIsReturnedAsIs(t *testing.T) {
	missing := &types.QueueDoesNotExist{Message: aws.String("gone")}
	api := &fakeAPI{send: func(*awssqs.SendMessageInput) error { return missing }}
	pub, _, _ := newTestPublisher(t, api, loose)
	err := pub.Publish(context.Background(), orders, bodies(1, 1)...)
	if err != missing {
		t.Fatalf("publish: %v, want the SDK's error itself", err)
	}
	// The missing queue's URL is looked up again next time.
	_ = pub.Publish(context.Background(), orders, bodies(1, 1)...)
	if len(api.lookups) != 2 {
		t.Errorf("%d lookups, want 2", len(api.lookups))
	}
}

func TestClientPanicCompletesNeutral(t *testing.T) {
	api := &fakeAPI{send: func(*awssqs.SendMessageInput) error { panic("client bug") }}
	pub, reg, _ := newTestPublisher(t, api, breaker.Policy{FailureThreshold: 1, BreakDuration: time.Minute, MaxInFlight: 1})
	func() {
		defer func() {
			if recover() == nil {
				t.Error("the panic was swallowed")
			}
		}()
		_ = pub.Publish(context.Background(), orders, bodies(1, 1)...)
	}()
	if s := snapshot(t, reg, orders); s.State != breaker.Closed || s.InFlight != 0 || s.Failures != 0 {
		t.Errorf("circuit %v, %d in flight, %d failures after a panic", s.State, s.InFlight, s.Failures)
	}
}

func TestQueueURLAndNameShareACircuit(t *testing.T) {
	api := &fakeAPI{}
	pub, reg, _ := newTestPublisher(t, api, loose)
	url := "https://sqs.eu-west-1.amazonaws.com/123456789012/orders"
	if err := pub.Publish(context.Background(), transport.Destination{Broker: Broker, Name: url}, bodies(1, 1)...); err != nil {
		t.Fatal(err)
	}
	if err := pub.Publish(context.Background(), orders, bodies(1, 1)...); err != nil {
		t.Fatal(err)
	}
	if reg.Len() != 1 {
		t.Errorf("%d circuits, want 1", reg.Len())
	}
	if got := aws.ToString(api.singles[0].QueueUrl); got != url {
		t.Errorf("sent to %q, want the URL as given", got)
	}
	if len(api.lookups) != 1 {
		t.Errorf("lookups %v: a URL needs none, a name one", api.lookups)
	}
}

func TestInvalidDestinations(t *testing.T) {
	api := &fakeAPI{}
	pub, reg, _ := newTestPublisher(t, api, loose)
	for _, d := range []transport.Destination{
		{Broker: "kafka", Name: "orders"},
		{Broker: Broker, Name: ""},
		{Broker: Broker, Name: "https://sqs.test/"},
		{Broker: Broker, Name: "https:///orders"},
	} {
		if err := pub.Publish(context.Background(), d, bodies(1, 1)...); !errors.Is(err, transport.ErrInvalidDestination) {
			t.Errorf("%q: %v, want ErrInvalidDestination", d, err)
		}
	}
	if len(api.singles)+len(api.lookups) != 0 || reg.Len() != 0 {
		t.Error("an invalid destination reached the client or the registry")
	}
	if err := pub.Publish(context.Background(), orders); !errors.Is(err, registry.ErrNoMessages) || len(api.lookups) != 0 {
		t.Errorf("publishing nothing: %v, %d lookups", err, len(api.lookups))
	}
}

func TestMessagesBecomeEntries(t *testing.T) {
	api := &fakeAPI{}
	pub, _, _ := newTestPublisher(t, api, loose, WithDeduplicationID(FromHeader("dedup")))
	ms := []transport.Message{
		{Key: []byte("g1"), Value: []byte("one"), Headers: []transport.Header{{Key: "text", Value: []byte("héllo\tworld")}, {Key: "bin", Value: []byte{0x00, 0xff}}, {Key: "dedup", Value: []byte("d1")}}},
		{Key: []byte("g2"), Value: []byte("two")},
	}
	if err := pub.Publish(context.Background(), ordersF, ms...); err != nil {
		t.Fatal(err)
	}
	es := api.batches[0].Entries
	a := es[0].MessageAttributes
	if v := a["text"]; aws.ToString(v.DataType) != "String" || aws.ToString(v.StringValue) != "héllo\tworld" {
		t.Errorf("text header became %+v", v)
	}
	if v := a["bin"]; aws.ToString(v.DataType) != "Binary" || string(v.BinaryValue) != "\x00\xff" {
		t.Errorf("binary header became %+v", v)
	}
	if aws.ToString(es[0].MessageGroupId) != "g1" || aws.ToString(es[0].MessageDeduplicationId) != "d1" {
		t.Errorf("entry 0 group %q dedup %q", aws.ToString(es[0].MessageGroupId), aws.ToString(es[0].MessageDeduplicationId))
	}
	if aws.ToString(es[1].MessageGroupId) != "g2" || es[1].MessageDeduplicationId != nil {
		t.Errorf("entry 1 group %q dedup %v", aws.ToString(es[1].MessageGroupId), es[1].MessageDeduplicationId)
	}
	// A standard queue gets no group or deduplication ID.
	if err := pub.Publish(context.Background(), orders, ms[0]); err != nil {
		t.Fatal(err)
	}
	if s := api.singles[0]; s.MessageGroupId != nil || s.MessageDeduplicationId != nil {
		t.Errorf("standard queue got group %v dedup %v", s.MessageGroupId, s.MessageDeduplicationId)
	}
}

// Messages published with ids (the outbox's rows) are deduplicated by them on FIFO
// queues unless WithDeduplicationID gives one; standard queues get none.
func TestMessageIDsAreFIFODeduplicationIDs(t *testing.T) {
	api := &fakeAPI{}
	pub, _, _ := newTestPublisher(t, api, loose, WithDeduplicationID(FromHeader("dedup")))
	ms := []transport.Message{
		{Key: []byte("g"), Value: []byte("same"), Headers: []transport.Header{{Key: "dedup", Value: []byte("own")}}},
		{Key: []byte("g"), Value: []byte("same")},
	}
	ctx := transport.WithMessageIDs(context.Background(), []string{"41", "42"})
	if err := pub.Publish(ctx, ordersF, ms...); err != nil {
		t.Fatal(err)
	}
	es := api.batches[0].Entries
	if got := []string{aws.ToString(es[0].MessageDeduplicationId), aws.ToString(es[1].MessageDeduplicationId)}; got[0] != "own" || got[1] != "42" {
		t.Errorf("deduplication ids %q, want the header's then the message id", got)
	}
	// Ids that do not match the messages one for one are not used.
	short := transport.WithMessageIDs(context.Background(), []string{"1"})
	if err := pub.Publish(short, ordersF, ms[1], ms[1]); err != nil {
		t.Fatal(err)
	}
	if es := api.batches[1].Entries; es[0].MessageDeduplicationId != nil || es[1].MessageDeduplicationId != nil {
		t.Errorf("mismatched ids were used: %v %v", es[0].MessageDeduplicationId, es[1].MessageDeduplicationId)
	}
	if err := pub.Publish(ctx, orders, ms[1], ms[1]); err != nil {
		t.Fatal(err)
	}
	if es := api.batches[2].Entries; es[0].MessageDeduplicationId != nil {
		t.Error("a standard queue got a deduplication id")
	}
}

func TestEntrySizeCountsWhatSQSCounts(t *testing.T) {
	pub, _, _ := newTestPublisher(t, &fakeAPI{}, loose)
	q, _ := resolve(orders)
	_, size, err := pub.entry(q, 0, transport.Message{Value: []byte("12345"), Headers: []transport.Header{{Key: "ab", Value: []byte("xyz")}, {Key: "c", Value: []byte{0}}}}, "")
	if err != nil {
		t.Fatal(err)
	}
	// body 5 + "ab" "String" "xyz" (2+6+3) + "c" "Binary" 0x00 (1+6+1)
	if size != 24 {
		t.Errorf("size %d, want 24", size)
	}
}

func TestInvalidMessagesAreRefusedBeforeSending(t *testing.T) {
	for _, tc := range []struct {
		name string
		d    transport.Destination
		m    transport.Message
	}{
		{"empty header value", orders, transport.Message{Value: []byte("x"), Headers: []transport.Header{{Key: "k"}}}},
		{"header without key", orders, transport.Message{Value: []byte("x"), Headers: []transport.Header{{Value: []byte("v")}}}},
		{"repeated header", orders, transport.Message{Value: []byte("x"), Headers: []transport.Header{{Key: "k", Value: []byte("1")}, {Key: "k", Value: []byte("2")}}}},
		{"FIFO message without group", ordersF, transport.Message{Value: []byte("x")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			api := &fakeAPI{}
			pub, _, _ := newTestPublisher(t, api, loose)
			err := pub.Publish(context.Background(), tc.d, transport.Message{Key: []byte("g"), Value: []byte("fine")}, tc.m)
			ie, ok := errors.AsType[*InvalidMessageError](err)
			if !ok || ie.Index != 1 || !errors.Is(err, ErrInvalidMessage) {
				t.Fatalf("publish: %v, want an InvalidMessageError for message 1", err)
			}
			if Classify(err) != breaker.Rejected {
				t.Errorf("Classify(%v) = %v, want rejected", err, Classify(err))
			}
			if len(api.batches)+len(api.singles)+len(api.lookups) != 0 {
				t.Error("an invalid message reached the client")
			}
		})
	}
}

func TestNewPublisherValidates(t *testing.T) {
	reg, err := registry.New(registry.Policy{Circuit: loose})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewPublisher(nil, reg); err == nil {
		t.Error("nil client accepted")
	}
	if _, err := NewPublisher(&fakeAPI{}, nil); err == nil {
		t.Error("nil registry accepted")
	}
	if _, err := NewPublisher(&fakeAPI{}, reg, WithMaxBatchBytes(0)); err == nil {
		t.Error("zero batch size accepted")
	}
	if _, err := NewPublisher(&fakeAPI{}, reg, WithGroupID(nil)); err == nil {
		t.Error("nil group function accepted")
	}
}

func TestHeadersFromAttributes(t *testing.T) {
	got := Headers(map[string]types.MessageAttributeValue{
		"b": {DataType: aws.String("Binary"), BinaryValue: []byte{1}},
		"a": {DataType: aws.String("String"), StringValue: aws.String("x")},
		"n": {DataType: aws.String("Number"), StringValue: aws.String("42")},
	})
	want := []transport.Header{{Key: "a", Value: []byte("x")}, {Key: "b", Value: []byte{1}}, {Key: "n", Value: []byte("42")}}
	if !slices.EqualFunc(got, want, func(x, y transport.Header) bool { return x.Key == y.Key && string(x.Value) == string(y.Value) }) {
		t.Errorf("Headers = %v, want %v", got, want)
	}
}
