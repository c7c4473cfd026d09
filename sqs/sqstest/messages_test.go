package sqstest_test

import (
	"bytes"
	"context"
	"fmt"
	"strconv"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

func str(dataType, v string) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String(dataType), StringValue: aws.String(v)}
}

func bin(v []byte) types.MessageAttributeValue {
	return types.MessageAttributeValue{DataType: aws.String("Binary"), BinaryValue: v}
}

func TestRoundTripKeepsBodyAndAttributes(t *testing.T) {
	clk := newClock()
	srv, c, url := setup(t, "orders", nil, sqstest.WithClock(clk.Now))
	ctx := context.Background()
	if url != srv.QueueURL("orders") {
		t.Fatalf("queue URL %q, want %q", url, srv.QueueURL("orders"))
	}

	attrs := map[string]types.MessageAttributeValue{
		"trace":  str("String", "abc-123"),
		"amount": str("Number", "42.5"),
		"blob":   bin([]byte{0, 1, 2, 0xff}),
		"kind":   str("String.custom", "x"),
	}
	sent, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("héllo"), MessageAttributes: attrs})
	if err != nil {
		t.Fatal(err) // the SDK also checked MD5OfMessageBody here
	}

	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{
		QueueUrl: &url, MaxNumberOfMessages: 10,
		MessageAttributeNames:       []string{"All"},
		MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameAll},
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Messages) != 1 {
		t.Fatalf("received %d messages, want 1", len(got.Messages))
	}
	m := got.Messages[0]
	if aws.ToString(m.Body) != "héllo" || aws.ToString(m.MessageId) != aws.ToString(sent.MessageId) {
		t.Fatalf("received body %q id %q, sent id %q", aws.ToString(m.Body), aws.ToString(m.MessageId), aws.ToString(sent.MessageId))
	}
	if len(m.MessageAttributes) != len(attrs) {
		t.Fatalf("received %d attributes, want %d", len(m.MessageAttributes), len(attrs))
	}
	for name, want := range attrs {
		got := m.MessageAttributes[name]
		if aws.ToString(got.DataType) != aws.ToString(want.DataType) || aws.ToString(got.StringValue) != aws.ToString(want.StringValue) || !bytes.Equal(got.BinaryValue, want.BinaryValue) {
			t.Errorf("attribute %s = %+v, want %+v", name, got, want)
		}
	}
	if aws.ToString(m.MD5OfMessageAttributes) != aws.ToString(sent.MD5OfMessageAttributes) || aws.ToString(sent.MD5OfMessageAttributes) == "" {
		t.Errorf("MD5OfMessageAttributes received %q, sent %q", aws.ToString(m.MD5OfMessageAttributes), aws.ToString(sent.MD5OfMessageAttributes))
	}
	wantSys := map[string]string{
		"SentTimestamp":           strconv.FormatInt(clk.Now().UnixMilli(), 10),
		"ApproximateReceiveCount": "1",
		"SenderId":                "000000000000",
	}
	for k, v := range wantSys {
		if m.Attributes[k] != v {
			t.Errorf("system attribute %s = %q, want %q", k, m.Attributes[k], v)
		}
	}

	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: m.ReceiptHandle}); err != nil {
		t.Fatal(err)
	}
	if n := len(srv.Messages("orders")); n != 0 {
		t.Fatalf("%d messages left after delete, want 0", n)
	}
}

func TestReceiveFiltersAttributesAndDigestsTheSubset(t *testing.T) {
	_, c, url := setup(t, "q", nil)
	ctx := context.Background()
	attrs := map[string]types.MessageAttributeValue{
		"app.user": str("String", "u1"), "app.tenant": str("String", "t1"), "other": str("Number", "7"),
	}
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("b"), MessageAttributes: attrs}); err != nil {
		t.Fatal(err)
	}
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MessageAttributeNames: []string{"app.*"}})
	if err != nil || len(got.Messages) != 1 {
		t.Fatalf("receive: %v, %d messages", err, len(got.Messages))
	}
	m := got.Messages[0]
	if len(m.MessageAttributes) != 2 || m.MessageAttributes["other"].DataType != nil {
		t.Fatalf("received attributes %v, want only app.*", m.MessageAttributes)
	}
	if len(m.Attributes) != 0 {
		t.Errorf("system attributes %v returned without being asked for", m.Attributes)
	}
	// The digest of the two returned attributes must differ from that of all three.
	all, _ := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("b"), MessageAttributes: attrs})
	if aws.ToString(m.MD5OfMessageAttributes) == aws.ToString(all.MD5OfMessageAttributes) {
		t.Error("MD5OfMessageAttributes covers attributes that were not returned")
	}
}

// Reference digests that other SQS client and server test suites check
// against; the binary and two-string cases are AWS sample values.
func TestAttributeDigestMatchesKnownValues(t *testing.T) {
	_, c, url := setup(t, "digests", nil)
	for _, tc := range []struct {
		attrs map[string]types.MessageAttributeValue
		want  string
	}{
		{map[string]types.MessageAttributeValue{"SellerName": str("String", "Example Store")}, "cd28f3b68aeee4b2eac9c66f2f694b58"},
		{map[string]types.MessageAttributeValue{"ordinal": str("Number", "1"), "category": str("String", "test")}, "d21ae90c49061e927f57df5f5d72be1f"},
		{map[string]types.MessageAttributeValue{
			"test_attribute_name_2": str("String", "test_attribute_value_2"),
			"test_attribute_name_1": str("String", "test_attribute_value_1"),
		}, "d53f3b558fe951154770f25cb63dbba9"},
		{map[string]types.MessageAttributeValue{"test_attribute_name": bin([]byte("test_attribute_value"))}, "23f6bd27ea87aab7dfeadcc9aebee495"},
	} {
		out, err := c.SendMessage(context.Background(), &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"), MessageAttributes: tc.attrs})
		if err != nil {
			t.Fatal(err)
		}
		if got := aws.ToString(out.MD5OfMessageAttributes); got != tc.want {
			t.Errorf("MD5OfMessageAttributes for %d attributes = %s, want %s", len(tc.attrs), got, tc.want)
		}
	}
}

func TestVisibilityTimeoutRedelivers(t *testing.T) {
	clk := newClock()
	srv, c, url := setup(t, "vis", map[string]string{"VisibilityTimeout": "60"}, sqstest.WithClock(clk.Now))
	ctx := context.Background()
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("m")}); err != nil {
		t.Fatal(err)
	}
	receive := func(vis int32) int {
		t.Helper()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, VisibilityTimeout: vis})
		if err != nil {
			t.Fatal(err)
		}
		return len(out.Messages)
	}
	counts := func() (string, string) {
		out, err := c.GetQueueAttributes(ctx, &sqs.GetQueueAttributesInput{QueueUrl: &url, AttributeNames: []types.QueueAttributeName{types.QueueAttributeNameAll}})
		if err != nil {
			t.Fatal(err)
		}
		return out.Attributes["ApproximateNumberOfMessages"], out.Attributes["ApproximateNumberOfMessagesNotVisible"]
	}
	if n := receive(10); n != 1 {
		t.Fatalf("first receive got %d", n)
	}
	if v, h := counts(); v != "0" || h != "1" {
		t.Fatalf("after receive: visible %s, not visible %s; want 0, 1", v, h)
	}
	if n := receive(0); n != 0 {
		t.Fatalf("receive while in flight got %d", n)
	}
	clk.Advance(10 * time.Second)
	if n := receive(0); n != 1 {
		t.Fatalf("receive after the visibility timeout got %d", n)
	}
	if got := srv.Messages("vis")[0].ReceiveCount; got != 2 {
		t.Fatalf("ReceiveCount %d, want 2", got)
	}
}

func TestLongPollReturnsWhenAMessageArrives(t *testing.T) {
	srv, c, url := setup(t, "poll", nil)
	ctx := context.Background()
	done := make(chan *sqs.ReceiveMessageOutput, 1)
	go func() {
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, WaitTimeSeconds: 20})
		if err != nil {
			t.Error(err)
		}
		done <- out
	}()
	eventually(t, "receive request", func() bool { return srv.Requests("poll", "ReceiveMessage") == 1 })
	if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("late")}); err != nil {
		t.Fatal(err)
	}
	if out := <-done; out == nil || len(out.Messages) != 1 {
		t.Fatalf("long poll returned %+v, want the message", out)
	}
}

func TestFIFODeduplicatesWithinWindowAndOrdersGroups(t *testing.T) {
	clk := newClock()
	srv, c, url := setup(t, "jobs.fifo", map[string]string{"FifoQueue": "true", "ContentBasedDeduplication": "true"}, sqstest.WithClock(clk.Now))
	ctx := context.Background()
	send := func(group, body, dedup string) *sqs.SendMessageOutput {
		t.Helper()
		in := &sqs.SendMessageInput{QueueUrl: &url, MessageBody: &body, MessageGroupId: &group}
		if dedup != "" {
			in.MessageDeduplicationId = &dedup
		}
		out, err := c.SendMessage(ctx, in)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}

	a1 := send("a", "a1", "")
	a2 := send("a", "a2", "")
	b1 := send("b", "b1", "id-b1")
	if s1, s2 := aws.ToString(a1.SequenceNumber), aws.ToString(a2.SequenceNumber); s1 == "" || s1 >= s2 {
		t.Fatalf("sequence numbers %q, %q not increasing", s1, s2)
	}
	if dup := send("a", "a1", ""); aws.ToString(dup.MessageId) != aws.ToString(a1.MessageId) {
		t.Error("content-based duplicate got a new message ID")
	}
	if dup := send("b", "other body", "id-b1"); aws.ToString(dup.MessageId) != aws.ToString(b1.MessageId) {
		t.Error("explicit-ID duplicate got a new message ID")
	}
	if n := len(srv.Messages("jobs.fifo")); n != 3 {
		t.Fatalf("%d messages stored, want 3 (duplicates dropped)", n)
	}
	clk.Advance(5 * time.Minute)
	send("a", "a1", "") // the window has passed: accepted again
	if n := len(srv.Messages("jobs.fifo")); n != 4 {
		t.Fatalf("%d messages stored after the window, want 4", n)
	}

	// One message per receive: a group's next message waits while an earlier one is in flight.
	receive := func() (string, *string) {
		t.Helper()
		out, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 1,
			MessageSystemAttributeNames: []types.MessageSystemAttributeName{types.MessageSystemAttributeNameMessageGroupId}})
		if err != nil {
			t.Fatal(err)
		}
		if len(out.Messages) == 0 {
			return "", nil
		}
		m := out.Messages[0]
		return m.Attributes["MessageGroupId"] + "/" + aws.ToString(m.Body), m.ReceiptHandle
	}
	first, handle := receive()
	if first != "a/a1" {
		t.Fatalf("first receive %q, want a/a1", first)
	}
	if got, _ := receive(); got != "b/b1" {
		t.Fatalf("second receive %q, want b/b1 (group a is blocked)", got)
	}
	if got, _ := receive(); got != "" {
		t.Fatalf("third receive %q, want nothing", got)
	}
	if _, err := c.DeleteMessage(ctx, &sqs.DeleteMessageInput{QueueUrl: &url, ReceiptHandle: handle}); err != nil {
		t.Fatal(err)
	}
	if got, _ := receive(); got != "a/a2" {
		t.Fatalf("receive after deleting a1 %q, want a/a2", got)
	}
}

func TestFIFORequiresGroupAndDeduplication(t *testing.T) {
	_, c, url := setup(t, "strict.fifo", map[string]string{"FifoQueue": "true"})
	for _, tc := range []struct {
		name string
		in   *sqs.SendMessageInput
		code string
	}{
		{"no group", &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"), MessageDeduplicationId: aws.String("d")}, "MissingParameter"},
		{"no dedup ID", &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String("x"), MessageGroupId: aws.String("g")}, "InvalidParameterValue"},
	} {
		_, err := c.SendMessage(context.Background(), tc.in)
		if code := apiCode(t, err); code != tc.code {
			t.Errorf("%s: error code %q, want %q", tc.name, code, tc.code)
		}
	}
}

func TestSendMessageBatchReportsMixedEntryFailures(t *testing.T) {
	srv, c, url := setup(t, "batch", nil)
	srv.SetBatchEntryFault("batch", func(i int, id string) (sqstest.Fault, bool) {
		return sqstest.InternalError, i%2 == 1
	})
	var entries []types.SendMessageBatchRequestEntry
	for i := range 5 {
		e := types.SendMessageBatchRequestEntry{Id: aws.String(fmt.Sprint("e", i)), MessageBody: aws.String(fmt.Sprint("body ", i))}
		if i == 2 {
			e.MessageAttributes = map[string]types.MessageAttributeValue{"SellerName": str("String", "Example Store")}
		}
		entries = append(entries, e)
	}
	out, err := c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
	if err != nil {
		t.Fatal(err) // the SDK checked each successful entry's MD5OfMessageBody
	}
	var ok, failed []string
	for _, s := range out.Successful {
		ok = append(ok, aws.ToString(s.Id))
		if aws.ToString(s.Id) == "e2" && aws.ToString(s.MD5OfMessageAttributes) != "cd28f3b68aeee4b2eac9c66f2f694b58" {
			t.Errorf("entry e2 MD5OfMessageAttributes %q", aws.ToString(s.MD5OfMessageAttributes))
		}
	}
	for _, f := range out.Failed {
		failed = append(failed, aws.ToString(f.Id))
		if aws.ToString(f.Code) != "InternalError" || f.SenderFault {
			t.Errorf("failed entry %s: code %q sender %v", aws.ToString(f.Id), aws.ToString(f.Code), f.SenderFault)
		}
	}
	if fmt.Sprint(ok) != "[e0 e2 e4]" || fmt.Sprint(failed) != "[e1 e3]" {
		t.Fatalf("successful %v failed %v, want [e0 e2 e4] and [e1 e3]", ok, failed)
	}
	if n := len(srv.Messages("batch")); n != 3 {
		t.Fatalf("%d messages stored, want 3", n)
	}

	srv.SetBatchEntryFault("batch", nil)
	out, err = c.SendMessageBatch(context.Background(), &sqs.SendMessageBatchInput{QueueUrl: &url, Entries: entries})
	if err != nil || len(out.Successful) != 5 || len(out.Failed) != 0 {
		t.Fatalf("after clearing the hook: err %v, %d successful, %d failed", err, len(out.Successful), len(out.Failed))
	}
}

func TestDeleteMessageBatch(t *testing.T) {
	srv, c, url := setup(t, "del", nil)
	ctx := context.Background()
	for i := range 3 {
		if _, err := c.SendMessage(ctx, &sqs.SendMessageInput{QueueUrl: &url, MessageBody: aws.String(fmt.Sprint(i))}); err != nil {
			t.Fatal(err)
		}
	}
	got, err := c.ReceiveMessage(ctx, &sqs.ReceiveMessageInput{QueueUrl: &url, MaxNumberOfMessages: 2})
	if err != nil || len(got.Messages) != 2 {
		t.Fatalf("receive: %v, %d messages", err, len(got.Messages))
	}
	out, err := c.DeleteMessageBatch(ctx, &sqs.DeleteMessageBatchInput{QueueUrl: &url, Entries: []types.DeleteMessageBatchRequestEntry{
		{Id: aws.String("a"), ReceiptHandle: got.Messages[0].ReceiptHandle},
		{Id: aws.String("b"), ReceiptHandle: got.Messages[1].ReceiptHandle},
		{Id: aws.String("c"), ReceiptHandle: aws.String("garbage")},
	}})
	if err != nil {
		t.Fatal(err)
	}
	if len(out.Successful) != 2 || len(out.Failed) != 1 || aws.ToString(out.Failed[0].Code) != "ReceiptHandleIsInvalid" {
		t.Fatalf("successful %d, failed %+v", len(out.Successful), out.Failed)
	}
	if left := srv.Messages("del"); len(left) != 1 || left[0].Body != "2" {
		t.Fatalf("left %+v, want only message 2", left)
	}
}
