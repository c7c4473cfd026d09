package sqstest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/internal/option"
)

// ErrClosed is returned by [Server.AcceptConnections] after [Server.Close].
var ErrClosed = errors.New("sqstest: server closed")

// maxRequestBytes bounds a request body: ten 1 MiB entries plus JSON overhead.
const maxRequestBytes = 12 << 20

// Option configures a Server.
type Option func(*Server)

// WithClock makes the server read time from now instead of time.Now. It
// drives deduplication windows, visibility timeouts, delays and timestamps;
// only the real-time bound of a long poll (WaitTimeSeconds) ignores it.
func WithClock(now func() time.Time) Option { return func(s *Server) { s.now = now } }

// WithAccountID sets the account ID used in queue URLs (default "000000000000").
func WithAccountID(id string) Option { return func(s *Server) { s.account = id } }

// Server is an in-process SQS endpoint. Create one with [New] and release it
// with [Server.Close]. All methods are safe for concurrent use.
type Server struct {
	now     func() time.Time
	account string
	addr    string // host:port, fixed for the server's life

	mu          sync.Mutex // guards every field below and all queue state
	queues      map[string]*queue
	faults      map[string]Fault
	entryFaults map[string]EntryFaultFunc
	requests    map[[2]string]int // {queue, action} -> count
	live        *listening        // nil while connections are refused
	closed      bool
}

// EntryFaultFunc decides whether entry index (0-based) with the given Id of a
// SendMessageBatch request fails, and with which fault. It is called without
// any server lock held. [Hang] has no meaning for an entry: it is reported
// as a failed entry with code "Hang".
type EntryFaultFunc func(index int, id string) (Fault, bool)

// listening is one period during which the server accepts connections.
type listening struct {
	srv    *http.Server
	stop   chan struct{}  // closed when the period ends; releases held requests
	served chan struct{}  // closed when Serve has returned
	conns  sync.WaitGroup // open connections; Add happens only inside Serve
}

// New starts a server listening on a free port of 127.0.0.1.
func New(opts ...Option) (*Server, error) {
	s := &Server{
		now:         time.Now,
		account:     "000000000000",
		queues:      map[string]*queue{},
		faults:      map[string]Fault{},
		entryFaults: map[string]EntryFaultFunc{},
		requests:    map[[2]string]int{},
	}
	if err := option.ApplyAll("sqstest: New", s, opts); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, errors.Join(errors.New("sqstest: listen"), err)
	}
	s.addr = ln.Addr().String()
	s.live = s.serve(ln)
	return s, nil
}

// URL returns the endpoint to use as the SDK's BaseEndpoint, "http://127.0.0.1:port".
func (s *Server) URL() string { return "http://" + s.addr }

// QueueURL returns the URL of the queue with the given name, whether or not it exists.
func (s *Server) QueueURL(name string) string { return s.URL() + "/" + s.account + "/" + name }

// Close stops the server: it releases held requests, closes every
// connection and waits until all connection goroutines have ended.
// Close is idempotent.
func (s *Server) Close() {
	s.mu.Lock()
	s.closed = true
	l := s.live
	s.live = nil
	s.mu.Unlock()
	l.shutdown()
}

// RefuseConnections closes the listener and every open connection, so that
// clients get "connection refused" until [Server.AcceptConnections]. Queues
// and messages are kept. It returns once all connections have ended.
//
// As with a real endpoint that goes away, a client's first request on a
// connection it had pooled may fail with a write error or EOF instead,
// before the client dials again and is refused.
func (s *Server) RefuseConnections() {
	s.mu.Lock()
	l := s.live
	s.live = nil
	s.mu.Unlock()
	l.shutdown()
}

// AcceptConnections listens again on the same address after
// [Server.RefuseConnections], so clients recover with the same endpoint. It
// is a no-op while the server is listening and returns [ErrClosed] after Close.
func (s *Server) AcceptConnections() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.live != nil {
		return nil
	}
	ln, err := net.Listen("tcp", s.addr)
	if err != nil {
		return errors.Join(errors.New("sqstest: listen again on "+s.addr), err)
	}
	s.live = s.serve(ln)
	return nil
}

// SetFault makes every request addressed to the named queue (by QueueUrl or
// QueueName) fail with f until [Server.ClearFault]; the zero Fault clears.
// Requests are counted before the fault applies.
func (s *Server) SetFault(queue string, f Fault) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f.isZero() {
		delete(s.faults, queue)
		return
	}
	s.faults[queue] = f
}

// ClearFault removes the fault set for the named queue.
func (s *Server) ClearFault(queue string) { s.SetFault(queue, Fault{}) }

// SetBatchEntryFault installs fn to fail chosen entries of SendMessageBatch
// requests to the named queue; the failed entries are listed in the response's
// Failed list with the fault's Code, Message and Sender flag, and the rest are
// sent normally. A nil fn removes the hook.
func (s *Server) SetBatchEntryFault(queue string, fn EntryFaultFunc) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fn == nil {
		delete(s.entryFaults, queue)
		return
	}
	s.entryFaults[queue] = fn
}

// Requests returns how many requests of the action (for example
// "SendMessage") addressed to the named queue reached the server, including
// those answered with a fault.
func (s *Server) Requests(queue, action string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.requests[[2]string{queue, action}]
}

// serve starts an HTTP server on ln.
func (s *Server) serve(ln net.Listener) *listening {
	l := &listening{stop: make(chan struct{}), served: make(chan struct{})}
	l.srv = &http.Server{
		Handler:           http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.handle(w, r, l.stop) }),
		ReadHeaderTimeout: 10 * time.Second,
		ConnState: func(_ net.Conn, st http.ConnState) {
			switch st {
			case http.StateNew:
				l.conns.Add(1)
			case http.StateClosed, http.StateHijacked:
				l.conns.Done()
			}
		},
	}
	go func() {
		defer close(l.served)
		_ = l.srv.Serve(ln) // always ErrServerClosed after shutdown
	}()
	return l
}

// shutdown ends a listening period and waits for its goroutines. A nil l is a no-op.
func (l *listening) shutdown() {
	if l == nil {
		return
	}
	_ = l.srv.Close() // closes the listener and all connections first, so that
	close(l.stop)     // released handlers cannot send a response
	<-l.served        // after this no StateNew can happen, so Wait is safe
	l.conns.Wait()
}

// request holds the members of every supported action's input; each action
// reads the ones it defines.
type request struct {
	QueueName                   string
	QueueUrl                    string
	Attributes                  map[string]string // CreateQueue
	AttributeNames              []string          // GetQueueAttributes; ReceiveMessage (deprecated)
	MessageSystemAttributeNames []string
	MessageAttributeNames       []string
	MaxNumberOfMessages         int
	VisibilityTimeout           *int
	WaitTimeSeconds             int
	ReceiptHandle               string
	Entries                     []entry
	entry
}

// entry is a SendMessage input, a SendMessageBatch entry or a DeleteMessageBatch entry.
type entry struct {
	Id                     string
	MessageBody            *string
	DelaySeconds           *int
	MessageAttributes      map[string]Attribute
	MessageDeduplicationId string
	MessageGroupId         string
	ReceiptHandle          string
}

// handle serves one AWS JSON 1.0 request; stop is closed when the listening
// period ends.
func (s *Server) handle(w http.ResponseWriter, r *http.Request, stop <-chan struct{}) {
	action, ok := strings.CutPrefix(r.Header.Get("X-Amz-Target"), "AmazonSQS.")
	if r.Method != http.MethodPost || !ok {
		writeFault(w, invalidAction.with("expected POST with X-Amz-Target: AmazonSQS.<Action>"))
		return
	}
	var req request
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxRequestBytes))
	if err == nil {
		err = json.Unmarshal(body, &req)
	}
	if err != nil {
		writeFault(w, malformedInput.with(err.Error()))
		return
	}
	name := req.QueueName
	if req.QueueUrl != "" {
		name = req.QueueUrl[strings.LastIndexByte(req.QueueUrl, '/')+1:]
	}

	s.mu.Lock()
	s.requests[[2]string{name, action}]++
	fault, faulty := s.faults[name]
	s.mu.Unlock()
	if faulty {
		if fault.hang {
			select {
			case <-r.Context().Done():
			case <-stop:
			}
			return
		}
		writeFault(w, fault)
		return
	}

	var out any
	switch action {
	case "CreateQueue":
		out, err = s.createQueue(&req)
	case "GetQueueUrl":
		out, err = s.getQueueURL(name)
	case "GetQueueAttributes":
		out, err = s.getQueueAttributes(name, req.AttributeNames)
	case "SendMessage":
		out, err = s.sendMessage(name, &req.entry)
	case "SendMessageBatch":
		out, err = s.sendMessageBatch(name, req.Entries)
	case "ReceiveMessage":
		out, err = s.receiveMessage(r.Context(), stop, name, &req)
	case "DeleteMessage":
		out, err = s.deleteMessage(name, req.ReceiptHandle)
	case "DeleteMessageBatch":
		out, err = s.deleteMessageBatch(name, req.Entries)
	default:
		err = invalidAction.with("The action " + action + " is not valid for this endpoint.")
	}
	if f, ok := errors.AsType[Fault](err); ok {
		writeFault(w, f)
		return
	}
	if err != nil {
		writeFault(w, InternalError.with(err.Error()))
		return
	}
	writeJSON(w, http.StatusOK, out)
}

// newID returns a random identifier in UUID form.
func newID() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails
	h := hex.EncodeToString(b[:])
	return h[:8] + "-" + h[8:12] + "-" + h[12:16] + "-" + h[16:20] + "-" + h[20:]
}

// wait blocks until d passes, wake is closed, ctx ends or stop is closed.
func wait(ctx context.Context, stop <-chan struct{}, wake <-chan struct{}, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-wake:
	case <-ctx.Done():
	case <-stop:
	}
}
