package harness

import (
	"context"
	"encoding/json"
	"io"
	"log"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"sync/atomic"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"

	"github.com/brokerguard/brokerguard/sqs/sqstest"
)

// httpFault is an HTTP server in front of another one (a reverse proxy) that fails a
// share of the requests it receives with a response of the test's choosing, as a
// service in a brownout answers some requests with its own server errors and serves
// the rest. It counts what it received: the requests the service behind it was
// sent, so that a test can tell how much load a client put on a degraded service.
//
// Put a Proxy in front of it to make the service slow or refuse connections.
type httpFault struct {
	ln    net.Listener
	srv   *http.Server
	proxy *httputil.ReverseProxy
	fail  httpResponse
	share failShare

	received atomic.Int64 // requests that arrived, failed ones included
	failed   atomic.Int64 // requests answered with fail
}

// discardLog drops what the HTTP server and reverse proxy log: a client that gave up
// on a request is the scenario's business, not a line on the test's output.
var discardLog = log.New(io.Discard, "", 0)

// httpResponse is the response an httpFault fails a request with.
type httpResponse struct {
	Status int
	Header http.Header
	Body   []byte
}

// newHTTPFault listens on a loopback port in front of the HTTP server at upstream
// (a base URL such as "http://127.0.0.1:8080"), failing no request until
// SetFailShare, and failing with fail after it. It is closed when the test ends.
func newHTTPFault(t testing.TB, upstream string, fail httpResponse) *httpFault {
	t.Helper()
	u, err := url.Parse(upstream)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	f := &httpFault{ln: ln, fail: fail}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 1024 // one per client connection: no new connection per request under load
	f.proxy = &httputil.ReverseProxy{
		Rewrite:   func(r *httputil.ProxyRequest) { r.SetURL(u); r.Out.Host = r.In.Host },
		Transport: tr,
		ErrorLog:  discardLog,
	}
	f.srv = &http.Server{Handler: f, ErrorLog: discardLog}
	go func() { _ = f.srv.Serve(ln) }()
	t.Cleanup(func() {
		_ = f.srv.Close()
		tr.CloseIdleConnections()
	})
	return f
}

// Addr is the host:port the fault layer listens on.
func (f *httpFault) Addr() string { return f.ln.Addr().String() }

// URL is the base URL of the fault layer, to use in place of the upstream's.
func (f *httpFault) URL() string { return "http://" + f.Addr() }

// SetFailShare makes share (0 to 1) of the requests from now on fail, each drawn at
// random; 0 forwards every request.
func (f *httpFault) SetFailShare(share float64) { f.share.set(share) }

// Counts returns the requests the fault layer received so far and how many of them
// it failed; the others went to the upstream server.
func (f *httpFault) Counts() (received, failed int64) {
	return f.received.Load(), f.failed.Load()
}

// ServeHTTP fails the request or forwards it.
func (f *httpFault) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	f.received.Add(1)
	if !f.share.draw() {
		f.proxy.ServeHTTP(w, r)
		return
	}
	f.failed.Add(1)
	_, _ = io.Copy(io.Discard, r.Body) // so that the client's connection is reused
	for k, v := range f.fail.Header {
		w.Header()[k] = v
	}
	w.WriteHeader(f.fail.Status)
	_, _ = w.Write(f.fail.Body)
}

// sqsErrorResponse is the response SQS sends for f in the AWS JSON 1.0 protocol, as
// sqstest does: f's status, the error's type and message as JSON, and its query error
// code in x-amzn-query-error. The SDK decodes it into the same error as sqstest's own.
func sqsErrorResponse(f sqstest.Fault) httpResponse {
	side := "Receiver"
	if f.Sender {
		side = "Sender"
	}
	body, _ := json.Marshal(struct { // two strings: cannot fail
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{f.Type, f.Message})
	return httpResponse{Status: f.Status, Body: body, Header: http.Header{
		"Content-Type":       {"application/x-amz-json-1.0"},
		"X-Amzn-Query-Error": {f.Code + ";" + side},
		"X-Amzn-Requestid":   {"harness-fault"},
	}}
}

// FaultedSQS starts an SQS test server of the test's own with queue created on it,
// behind an httpFault that fails with fail, behind a Proxy, and returns an AWS SDK
// client with its defaults that reaches the server through both, the proxy (to make
// the server slow or refuse connections) and the fault layer (to fail a share of
// requests, and count them). All end with the test.
func FaultedSQS(t testing.TB, queue string, fail sqstest.Fault) (*awssqs.Client, *Proxy, *httpFault) {
	t.Helper()
	srv, err := sqstest.New()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(srv.Close)
	if _, err := sqsClient(srv.URL()).CreateQueue(context.Background(), &awssqs.CreateQueueInput{QueueName: aws.String(queue)}); err != nil {
		t.Fatal(err)
	}
	fault := newHTTPFault(t, srv.URL(), sqsErrorResponse(fail))
	proxy := NewProxy(t, fault.Addr())
	return sqsClient("http://" + proxy.Addr()), proxy, fault
}
