package harness

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net"
	"net/http"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/smithy-go"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

// shareRequests is the requests a fault layer's share is checked over; a share of 0
// or 1 has no spread, and fewer requests show it.
func shareRequests(share float64) int {
	if share == 0 || share == 1 {
		return 100
	}
	return 4000
}

// checkShare fails t when the layer did not receive the requests sent, or failed of
// them is further from share than six standard deviations of a share of 0.5 (the
// widest): a layer that fails the right share fails this about once in a billion
// runs, one that is off by a tenth always does.
func checkShare(t *testing.T, share float64, received, failed int64) {
	t.Helper()
	n := shareRequests(share)
	if received != int64(n) {
		t.Fatalf("share %.2f: the layer received %d requests, want %d", share, received, n)
	}
	tolerance := 6 * 0.5 / math.Sqrt(float64(n))
	if got := float64(failed) / float64(received); math.Abs(got-share) > tolerance {
		t.Errorf("share %.2f: %d of %d failed (%.3f), outside ±%.3f", share, failed, received, got, tolerance)
	}
}

// TestHTTPFaultShare: over many requests the layer fails the share set, answers
// the failed ones with exactly the response given and forwards the others, and its
// counts agree with what the client saw.
func TestHTTPFaultShare(t *testing.T) {
	var reached atomic.Int64
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	upstream := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reached.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		_, _ = w.Write([]byte("upstream"))
	})}
	go func() { _ = upstream.Serve(ln) }()
	t.Cleanup(func() { _ = upstream.Close() })
	fail := httpResponse{Status: 503, Header: http.Header{"X-Fault": {"yes"}}, Body: []byte("fault")}
	for _, share := range []float64{0, 0.1, 0.6, 1} {
		reached.Store(0)
		f := newHTTPFault(t, "http://"+ln.Addr().String(), fail)
		f.SetFailShare(share)
		var faults int64
		for range shareRequests(share) {
			resp, err := http.Post(f.URL()+"/x", "text/plain", bytes.NewReader([]byte("body")))
			if err != nil {
				t.Fatal(err)
			}
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			if err != nil {
				t.Fatal(err)
			}
			switch {
			case resp.StatusCode == 503 && string(body) == "fault" && resp.Header.Get("X-Fault") == "yes":
				faults++
			case resp.StatusCode == 200 && string(body) == "upstream":
			default:
				t.Fatalf("share %.2f: response %d %q is neither the fault nor the upstream's", share, resp.StatusCode, body)
			}
		}
		received, failed := f.Counts()
		if failed != faults {
			t.Errorf("share %.2f: the layer counted %d failed, the client saw %d", share, failed, faults)
		}
		checkShare(t, share, received, failed)
		if got := reached.Load(); got != received-failed {
			t.Errorf("share %.2f: %d requests reached the upstream, want the %d not failed", share, got, received-failed)
		}
	}
}

// TestSQSErrorResponse: the SDK reads the layer's SQS error as the same error
// sqstest itself sends.
func TestSQSErrorResponse(t *testing.T) {
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	client := func(endpoint string) *awssqs.Client {
		return awssqs.New(awssqs.Options{BaseEndpoint: aws.String(endpoint), Region: "us-east-1", RetryMaxAttempts: 1,
			Credentials: credentials.NewStaticCredentialsProvider("test", "test", "")})
	}
	ctx := context.Background()
	if _, err := client(srv.URL()).CreateQueue(ctx, &awssqs.CreateQueueInput{QueueName: aws.String("q")}); err != nil {
		t.Fatal(err)
	}
	send := func(endpoint string) smithy.APIError {
		_, err := client(endpoint).SendMessage(ctx, &awssqs.SendMessageInput{QueueUrl: aws.String(srv.QueueURL("q")), MessageBody: aws.String("m")})
		var api smithy.APIError
		if !errors.As(err, &api) {
			t.Fatalf("send: %v, want an API error", err)
		}
		return api
	}
	for _, fault := range []sqstest.Fault{sqstest.ServiceUnavailable, sqstest.InternalError} {
		f := newHTTPFault(t, srv.URL(), sqsErrorResponse(fault))
		f.SetFailShare(1)
		got := send(f.URL())
		srv.SetFault("q", fault)
		want := send(srv.URL())
		srv.ClearFault("q")
		if got.ErrorCode() != want.ErrorCode() || got.ErrorFault() != want.ErrorFault() || got.ErrorMessage() != want.ErrorMessage() {
			t.Errorf("%s: the layer's error reads as %q/%v/%q, sqstest's as %q/%v/%q", fault.Code,
				got.ErrorCode(), got.ErrorFault(), got.ErrorMessage(), want.ErrorCode(), want.ErrorFault(), want.ErrorMessage())
		}
	}
}
