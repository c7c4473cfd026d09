package sqstest

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strconv"
	"strings"
	"time"
)

const (
	dedupWindow      = 5 * time.Minute
	defaultMaxSize   = 262144 // bytes of body plus attributes
	maxAttributes    = 10
	maxBatchEntries  = 10
	maxLongPoll      = 20 * time.Second
	defaultVisibSecs = 30
)

// Attribute is a message attribute, as sent and received by clients.
type Attribute struct {
	DataType    string `json:"DataType"`              // "String", "Number" or "Binary", optionally with a ".suffix"
	StringValue string `json:"StringValue,omitempty"` // for String and Number
	BinaryValue []byte `json:"BinaryValue,omitempty"` // for Binary
}

// Message is a snapshot of a message stored in a queue.
type Message struct {
	ID              string
	Body            string
	Attributes      map[string]Attribute
	GroupID         string // FIFO only
	DeduplicationID string // FIFO only
	SequenceNumber  string // FIFO only
	SentAt          time.Time
	ReceiveCount    int // times delivered by ReceiveMessage
}

// message is a stored message and its delivery state.
type message struct {
	Message
	visibleAt    time.Time // received or delayed messages are hidden until then
	firstReceive time.Time
	deleted      bool
}

// dedupEntry remembers a FIFO send for the deduplication window.
type dedupEntry struct {
	id       string
	expires  time.Time
	msgID    string
	sequence string
}

// queue is one queue. Every field is guarded by Server.mu.
type queue struct {
	name, url    string
	created      time.Time
	attrs        map[string]string // as given to CreateQueue
	fifo         bool
	contentDedup bool
	visibility   time.Duration
	delay        time.Duration
	maxSize      int

	msgs   []*message          // in send order; deleted ones are compacted lazily
	byID   map[string]*message // messages not deleted
	dedup  map[string]dedupEntry
	dedupQ []dedupEntry // dedup entries in expiry order, for pruning
	seq    uint64
	wake   chan struct{} // closed and replaced when a message is added
}

// Messages returns a snapshot of every message stored in the named queue,
// in send order, whether received or not; deleted messages are gone. It
// returns nil for an unknown queue.
func (s *Server) Messages(queueName string) []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	q := s.queues[queueName]
	if q == nil {
		return nil
	}
	out := make([]Message, 0, len(q.byID))
	for _, m := range q.msgs {
		if !m.deleted {
			out = append(out, m.Message)
		}
	}
	return out
}

// queue returns the named queue or a QueueDoesNotExist fault. It requires s.mu held.
func (s *Server) queue(name string) (*queue, error) {
	if q := s.queues[name]; q != nil {
		return q, nil
	}
	return nil, QueueDoesNotExist
}

// newQueue validates CreateQueue input and builds the queue.
func (s *Server) newQueue(name string, attrs map[string]string) (*queue, error) {
	if name == "" {
		return nil, missingParameter.with("The request must contain the parameter QueueName.")
	}
	q := &queue{
		name: name, url: s.QueueURL(name), created: s.now(), attrs: attrs,
		visibility: defaultVisibSecs * time.Second, maxSize: defaultMaxSize,
		byID: map[string]*message{}, dedup: map[string]dedupEntry{}, wake: make(chan struct{}),
	}
	q.fifo = attrs["FifoQueue"] == "true"
	q.contentDedup = attrs["ContentBasedDeduplication"] == "true"
	if q.fifo != strings.HasSuffix(name, ".fifo") {
		return nil, InvalidParameterValue.with("The name of a FIFO queue must end with .fifo and only a FIFO queue may use it.")
	}
	if q.contentDedup && !q.fifo {
		return nil, InvalidParameterValue.with("ContentBasedDeduplication is only valid for FIFO queues.")
	}
	for key, dst := range map[string]*time.Duration{"VisibilityTimeout": &q.visibility, "DelaySeconds": &q.delay} {
		if v, ok := attrs[key]; ok {
			n, err := strconv.Atoi(v)
			if err != nil || n < 0 {
				return nil, InvalidParameterValue.with("Invalid value for the parameter " + key + ".")
			}
			*dst = time.Duration(n) * time.Second
		}
	}
	if v, ok := attrs["MaximumMessageSize"]; ok {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1024 || n > 1<<20 {
			return nil, InvalidParameterValue.with("Invalid value for the parameter MaximumMessageSize.")
		}
		q.maxSize = n
	}
	return q, nil
}

// validate checks one message against the queue's rules and returns its
// deduplication ID (FIFO only).
func (q *queue) validate(e *entry) (string, error) {
	if err := validBody(e.MessageBody); err != nil {
		return "", err
	}
	size, err := attributesSize(e.MessageAttributes)
	if err != nil {
		return "", err
	}
	if size += len(*e.MessageBody); size > q.maxSize {
		return "", InvalidParameterValue.with(fmt.Sprintf("One or more parameters are invalid. Reason: Message must be shorter than %d bytes.", q.maxSize))
	}
	if !q.fifo {
		// SQS accepts MessageGroupId on standard queues (fair queues), but no deduplication ID.
		if e.MessageDeduplicationId != "" {
			return "", InvalidParameterValue.with("The request includes a parameter that is not valid for this queue type: MessageDeduplicationId.")
		}
		return "", nil
	}
	return q.fifoDedupID(e)
}

// validBody refuses a missing or empty body and one with a character outside the
// XML character ranges SQS allows.
func validBody(body *string) error {
	if body == nil || *body == "" {
		return missingParameter.with("The request must contain the parameter MessageBody.")
	}
	for _, r := range *body {
		if !(r == 0x9 || r == 0xA || r == 0xD || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000 && r <= 0x10FFFF) {
			return InvalidMessageContents.with("Invalid binary character '#x" + strconv.FormatInt(int64(r), 16) + "' was found in the message body.")
		}
	}
	return nil
}

// attributesSize checks the message attributes and returns the bytes they add to
// the message's size.
func attributesSize(attrs map[string]Attribute) (int, error) {
	if len(attrs) > maxAttributes {
		return 0, InvalidParameterValue.with("Number of message attributes cannot exceed 10.")
	}
	size := 0
	for name, a := range attrs {
		base, _, _ := strings.Cut(a.DataType, ".")
		ok := name != "" && (base == "String" || base == "Number") && a.StringValue != "" || base == "Binary" && len(a.BinaryValue) > 0
		if !ok {
			return 0, InvalidParameterValue.with("The message attribute '" + name + "' must have a DataType of String, Number or Binary and a matching non-empty value.")
		}
		size += len(name) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
	}
	return size, nil
}

// fifoDedupID checks a FIFO queue's own parameters and returns the message's
// deduplication ID: the one it gives, or its body's hash under content-based
// deduplication.
func (q *queue) fifoDedupID(e *entry) (string, error) {
	if e.MessageGroupId == "" {
		return "", missingParameter.with("The request must contain the parameter MessageGroupId.")
	}
	if e.DelaySeconds != nil && *e.DelaySeconds != 0 {
		return "", InvalidParameterValue.with("The request includes a parameter that is not valid for this queue type: DelaySeconds.")
	}
	switch {
	case e.MessageDeduplicationId != "":
		return e.MessageDeduplicationId, nil
	case q.contentDedup:
		sum := sha256.Sum256([]byte(*e.MessageBody))
		return hex.EncodeToString(sum[:]), nil
	default:
		return "", InvalidParameterValue.with("The queue should either have ContentBasedDeduplication enabled or MessageDeduplicationId provided explicitly.")
	}
}

// add stores a validated message unless it duplicates one sent within the
// deduplication window, and returns the stored (or original) message's ID
// and sequence number. It requires s.mu held.
func (q *queue) add(now time.Time, e *entry, dedupID string) (msgID, sequence string) {
	if q.fifo {
		for len(q.dedupQ) > 0 && !now.Before(q.dedupQ[0].expires) {
			if d := q.dedupQ[0]; q.dedup[d.id] == d {
				delete(q.dedup, d.id)
			}
			q.dedupQ = q.dedupQ[1:]
		}
		if d, dup := q.dedup[dedupID]; dup {
			return d.msgID, d.sequence
		}
	}
	m := &message{Message: Message{ID: newID(), Body: *e.MessageBody, Attributes: e.MessageAttributes, SentAt: now}}
	m.visibleAt = now.Add(q.delay)
	if e.DelaySeconds != nil {
		m.visibleAt = now.Add(time.Duration(*e.DelaySeconds) * time.Second)
	}
	if q.fifo {
		q.seq++
		m.GroupID, m.DeduplicationID, m.SequenceNumber = e.MessageGroupId, dedupID, fmt.Sprintf("%020d", q.seq)
		d := dedupEntry{id: dedupID, expires: now.Add(dedupWindow), msgID: m.ID, sequence: m.SequenceNumber}
		q.dedup[dedupID] = d
		q.dedupQ = append(q.dedupQ, d)
	}
	q.msgs = append(q.msgs, m)
	q.byID[m.ID] = m
	close(q.wake)
	q.wake = make(chan struct{})
	return m.ID, m.SequenceNumber
}

// receive marks up to max visible messages as received and returns them
// with their new receipt handles. In a FIFO queue a message is held back
// while an earlier message of its group is hidden. It requires s.mu held.
func (q *queue) receive(now time.Time, max int, visibility time.Duration) ([]*message, []string) {
	var out []*message
	var handles []string
	blocked := map[string]bool{}
	for _, m := range q.msgs {
		if len(out) == max {
			break
		}
		if m.deleted || blocked[m.GroupID] {
			continue
		}
		if now.Before(m.visibleAt) {
			if q.fifo {
				blocked[m.GroupID] = true
			}
			continue
		}
		m.ReceiveCount++
		if m.firstReceive.IsZero() {
			m.firstReceive = now
		}
		m.visibleAt = now.Add(visibility)
		out, handles = append(out, m), append(handles, m.ID+":"+newID())
	}
	return out, handles
}

// remove deletes the message a receipt handle refers to. A handle names its
// message, so deleting an already-deleted message succeeds, as in SQS. It
// requires s.mu held.
func (q *queue) remove(handle string) error {
	id, _, ok := strings.Cut(handle, ":")
	if !ok || len(id) != len(newID()) {
		return handleInvalid.with("The input receipt handle \"" + handle + "\" is not a valid receipt handle.")
	}
	m := q.byID[id]
	if m == nil {
		return nil
	}
	m.deleted = true
	delete(q.byID, id)
	if len(q.msgs) > 64 && len(q.byID) < len(q.msgs)/2 {
		kept := q.msgs[:0]
		for _, m := range q.msgs {
			if !m.deleted {
				kept = append(kept, m)
			}
		}
		clear(q.msgs[len(kept):])
		q.msgs = kept
	}
	return nil
}
