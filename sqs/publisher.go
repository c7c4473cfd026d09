package sqs

import (
	"context"
	"errors"
	"net/url"
	"path"
	"strconv"
	"strings"
	"sync"

	"github.com/aws/aws-sdk-go-v2/aws"
	awssqs "github.com/aws/aws-sdk-go-v2/service/sqs"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/internal/option"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// Broker is the Destination.Broker of SQS queues.
const Broker = "sqs"

const (
	maxBatchEntries = 10
	// DefaultMaxBatchBytes is the payload limit of one SendMessageBatch
	// request unless WithMaxBatchBytes says otherwise: SQS's classic limit.
	DefaultMaxBatchBytes = 262_144
)

// API is the part of the SQS client a Publisher uses; *sqs.Client has it.
type API interface {
	SendMessage(ctx context.Context, in *awssqs.SendMessageInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageOutput, error)
	SendMessageBatch(ctx context.Context, in *awssqs.SendMessageBatchInput, optFns ...func(*awssqs.Options)) (*awssqs.SendMessageBatchOutput, error)
	GetQueueUrl(ctx context.Context, in *awssqs.GetQueueUrlInput, optFns ...func(*awssqs.Options)) (*awssqs.GetQueueUrlOutput, error)
}

var _ API = (*awssqs.Client)(nil)

// Publisher publishes to SQS queues, each under its own circuit. It is safe
// for concurrent use.
type Publisher struct {
	api      API
	reg      *registry.Registry
	maxBytes int
	groupID  func(transport.Message) string
	dedupID  func(transport.Message) string

	mu   sync.RWMutex
	urls map[string]string // queue name -> URL from GetQueueUrl; guarded by mu
}

var _ transport.Publisher = (*Publisher)(nil)

// Option configures a Publisher.
type Option func(*Publisher) error

// WithGroupID sets how a message's MessageGroupId is chosen for FIFO queues.
// The default is string(Message.Key); FromHeader reads a header instead.
func WithGroupID(f func(transport.Message) string) Option {
	return option.Check(f == nil, "sqs: WithGroupID needs a function", func(p *Publisher) { p.groupID = f })
}

// WithDeduplicationID sets how a message's MessageDeduplicationId is chosen
// for FIFO queues. When it is not given, or returns "", a message published with
// an id (transport.WithMessageIDs: the outbox gives each row's) is deduplicated by
// that id, so that a row published again within SQS's five-minute window is stored
// once and rows with equal bodies are all stored; a message without either sends
// none, and the queue needs ContentBasedDeduplication (which drops equal bodies
// sent within five minutes of each other).
func WithDeduplicationID(f func(transport.Message) string) Option {
	return option.Set(func(p *Publisher) { p.dedupID = f })
}

// WithMaxBatchBytes sets the payload limit of one SendMessageBatch request
// (default DefaultMaxBatchBytes). Raise it only for queues that accept it.
func WithMaxBatchBytes(n int) Option {
	return option.Check(n <= 0, "sqs: WithMaxBatchBytes needs a positive size, got "+strconv.Itoa(n), func(p *Publisher) { p.maxBytes = n })
}

// NewPublisher returns a Publisher that sends through api under the circuits
// of reg.
func NewPublisher(api API, reg *registry.Registry, opts ...Option) (*Publisher, error) {
	if api == nil || reg == nil {
		return nil, errors.New("sqs: NewPublisher needs a client and a registry")
	}
	p := &Publisher{
		api:      api,
		reg:      reg,
		maxBytes: DefaultMaxBatchBytes,
		groupID:  func(m transport.Message) string { return string(m.Key) },
		urls:     make(map[string]string),
	}
	if err := option.Apply("sqs: NewPublisher", p, opts); err != nil {
		return nil, err
	}
	return p, nil
}

// queue is a destination resolved for publishing.
type queue struct {
	dest transport.Destination // sqs:<queue-name>: names the circuit
	name string
	url  string // "" until looked up, for a destination given by name
	fifo bool
}

// resolve turns a destination into the queue it names, without I/O.
func resolve(d transport.Destination) (queue, error) {
	if d.Broker != Broker {
		return queue{}, &transport.DestinationError{Input: d.String(), Reason: `the broker of an SQS destination is "sqs"`}
	}
	q := queue{name: d.Name}
	if strings.Contains(d.Name, "://") {
		u, err := url.Parse(d.Name)
		if err != nil || u.Host == "" || path.Base(u.Path) == "/" || path.Base(u.Path) == "." {
			return queue{}, &transport.DestinationError{Input: d.String(), Reason: "not a queue URL"}
		}
		q.name, q.url = path.Base(u.Path), d.Name
	}
	q.dest = transport.Destination{Broker: Broker, Name: q.name}
	q.fifo = strings.HasSuffix(q.name, ".fifo")
	return q, q.dest.Validate()
}

// Publish sends msgs to the queue d names; see the package documentation for
// how messages are sent and what the error says.
func (p *Publisher) Publish(ctx context.Context, d transport.Destination, msgs ...transport.Message) error {
	if ctx == nil {
		return errors.New("sqs: Publish: nil context")
	}
	q, err := resolve(d)
	if err != nil {
		return err
	}
	if len(msgs) == 0 {
		return registry.NoMessagesError(q.dest)
	}
	if _, err := p.reg.Circuit(q.dest); err != nil { // refuse a bad queue before building entries
		return err
	}
	entries := make([]types.SendMessageBatchRequestEntry, len(msgs))
	sizes := make([]int, len(msgs))
	ids := transport.MessageIDs(ctx)
	if len(ids) != len(msgs) {
		ids = nil
	}
	for i, m := range msgs {
		id := ""
		if ids != nil {
			id = ids[i]
		}
		if entries[i], sizes[i], err = p.entry(q, i, m, id); err != nil {
			return err
		}
	}
	var failed []transport.MessageError
	for start := 0; start < len(entries); {
		end := chunkEnd(sizes, start, p.maxBytes)
		chunk := entries[start:end]
		entryFailures, admitted, whole := p.guarded(ctx, &q, chunk)
		switch {
		case whole == nil:
			for _, f := range entryFailures {
				failed = append(failed, transport.MessageError{Index: start + f.Index, Err: f.Err})
			}
		case start == 0 && (end == len(entries) || !admitted):
			return whole // nothing was sent, or this was the only request
		default:
			if !admitted { // the circuit refused: nothing more goes
				end = len(entries)
			}
			for i := start; i < end; i++ {
				failed = append(failed, transport.MessageError{Index: i, Err: whole})
			}
		}
		start = end
	}
	if len(failed) == 0 {
		return nil
	}
	return &transport.BatchError{Destination: q.dest, Failed: failed}
}

// guarded sends one request under a permit of the queue's circuit. It returns the failed
// entries by index in chunk, or the error that failed the whole request;
// admitted is false when the circuit (or the ended context) refused it.
func (p *Publisher) guarded(ctx context.Context, q *queue, chunk []types.SendMessageBatchRequestEntry) (failed []transport.MessageError, admitted bool, whole error) {
	err := p.reg.Call(ctx, q.dest, len(chunk), Classify, func(ctx context.Context) error {
		admitted = true
		failed, whole = p.send(ctx, q, chunk)
		if whole == nil && len(failed) > 0 {
			return &transport.BatchError{Destination: q.dest, Failed: failed}
		}
		return whole
	})
	if !admitted {
		return nil, false, err
	}
	return failed, true, whole
}

// send makes one request for chunk, looking the queue's URL up first when
// needed.
func (p *Publisher) send(ctx context.Context, q *queue, chunk []types.SendMessageBatchRequestEntry) ([]transport.MessageError, error) {
	if q.url == "" {
		u, err := p.lookup(ctx, q.name)
		if err != nil {
			return nil, err
		}
		q.url = u
	}
	if len(chunk) == 1 {
		e := &chunk[0]
		_, err := p.api.SendMessage(ctx, &awssqs.SendMessageInput{
			QueueUrl:               &q.url,
			MessageBody:            e.MessageBody,
			MessageAttributes:      e.MessageAttributes,
			MessageGroupId:         e.MessageGroupId,
			MessageDeduplicationId: e.MessageDeduplicationId,
		})
		p.forgetIfMissing(q, err)
		return nil, err
	}
	for i := range chunk {
		chunk[i].Id = &entryIDs[i]
	}
	out, err := p.api.SendMessageBatch(ctx, &awssqs.SendMessageBatchInput{QueueUrl: &q.url, Entries: chunk})
	if err != nil {
		p.forgetIfMissing(q, err)
		return nil, err
	}
	return entryFailures(out, len(chunk)), nil
}

// entryFailures lists the entries of a batch of n that out reports failed or
// does not mention, by index.
func entryFailures(out *awssqs.SendMessageBatchOutput, n int) []transport.MessageError {
	if len(out.Failed) == 0 && len(out.Successful) == n {
		return nil
	}
	errs := make([]error, n)
	for i := range errs {
		errs[i] = ErrMissingResult
	}
	for _, s := range out.Successful {
		if i, ok := entryIndex(s.Id, n); ok {
			errs[i] = nil
		}
	}
	for _, f := range out.Failed {
		if i, ok := entryIndex(f.Id, n); ok {
			errs[i] = &EntryError{Code: aws.ToString(f.Code), Message: aws.ToString(f.Message), SenderFault: f.SenderFault}
		}
	}
	var failed []transport.MessageError
	for i, err := range errs {
		if err != nil {
			failed = append(failed, transport.MessageError{Index: i, Err: err})
		}
	}
	return failed
}

// entryIndex reads an entry Id of a batch of n back into its index.
func entryIndex(id *string, n int) (int, bool) {
	i, err := strconv.Atoi(aws.ToString(id))
	return i, err == nil && i >= 0 && i < n
}

// lookup returns the URL of the named queue, from the cache or GetQueueUrl.
func (p *Publisher) lookup(ctx context.Context, name string) (string, error) {
	p.mu.RLock()
	u, ok := p.urls[name]
	p.mu.RUnlock()
	if ok {
		return u, nil
	}
	out, err := p.api.GetQueueUrl(ctx, &awssqs.GetQueueUrlInput{QueueName: &name})
	if err != nil {
		return "", err
	}
	u = aws.ToString(out.QueueUrl)
	if u == "" {
		return "", errors.New("sqs: GetQueueUrl returned no URL for queue " + strconv.Quote(name))
	}
	p.mu.Lock()
	p.urls[name] = u
	p.mu.Unlock()
	return u, nil
}

// forgetIfMissing drops the cached URL of a queue SQS says does not exist, so
// that the next publish looks it up again.
func (p *Publisher) forgetIfMissing(q *queue, err error) {
	if _, missing := errors.AsType[*types.QueueDoesNotExist](err); !missing {
		return
	}
	p.mu.Lock()
	if p.urls[q.name] == q.url {
		delete(p.urls, q.name)
	}
	p.mu.Unlock()
}
