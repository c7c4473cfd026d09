package dynamo

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/dynamodb"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// lostAnswerTable is a DynamoDB endpoint whose first write is applied but whose answer
// is lost (the connection closes before the reply), and which then refuses every
// write's condition: what DynamoDB does when the SDK sends an applied write again.
func lostAnswerTable(t *testing.T, writes *atomic.Int64) *dynamodb.Client {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		target := r.Header.Get("X-Amz-Target")
		if !strings.HasSuffix(target, ".PutItem") && !strings.HasSuffix(target, ".UpdateItem") {
			http.Error(w, "unexpected "+target, http.StatusBadRequest)
			return
		}
		if writes.Add(1) == 1 {
			conn, _, err := w.(http.Hijacker).Hijack()
			if err == nil {
				conn.Close()
			}
			return
		}
		w.Header().Set("Content-Type", "application/x-amz-json-1.0")
		w.WriteHeader(http.StatusBadRequest)
		_, _ = w.Write([]byte(`{"__type":"com.amazonaws.dynamodb.v20120810#ConditionalCheckFailedException","message":"The conditional request failed"}`))
	}))
	t.Cleanup(srv.Close)
	return dynamodb.New(dynamodb.Options{
		Region: "us-east-1", BaseEndpoint: aws.String(srv.URL),
		Credentials: credentials.NewStaticCredentialsProvider("k", "s", ""),
	})
}

// A conditional write whose answer is lost may have been applied. The SDK must not
// send it again: the second attempt fails its condition on the first one's write,
// and the engine, told ErrConflict ("nothing was written"), would strand a probe lease
// that is in the table, or count a failure twice.
func TestLostWriteAnswerIsNotAConflict(t *testing.T) {
	for name, write := range map[string]func(*tableStore) error{
		"Replace": func(s *tableStore) error {
			r := sharedstate.Record{Version: 8, Fingerprint: "f", State: breaker.HalfOpen, Generation: 3,
				Leases: []sharedstate.Lease{{ID: 5, Owner: "a", Expires: 9}}}
			return s.Replace(context.Background(), "kafka:orders", 7, r)
		},
		"AddFailure": func(s *tableStore) error {
			_, err := s.AddFailure(context.Background(), "kafka:orders", sharedstate.Closed{Generation: 3, Fingerprint: "f", Limit: 5})
			return err
		},
	} {
		t.Run(name, func(t *testing.T) {
			var writes atomic.Int64
			err := write(&tableStore{client: lostAnswerTable(t, &writes), table: "circuits"})
			if err == nil || errors.Is(err, sharedstate.ErrConflict) {
				t.Errorf("write whose answer was lost returned %v; want an error that leaves its effect unknown", err)
			}
			if n := writes.Load(); n != 1 {
				t.Errorf("the write was sent %d times; a write that may have applied must be sent once", n)
			}
		})
	}
}
