package sqstest

import (
	"context"
	"crypto/md5"
	"encoding/binary"
	"encoding/hex"
	"maps"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Response shapes. Field names are the SQS model's member names.
type (
	queueURLOutput struct{ QueueUrl string }
	sendOutput     struct {
		Id                     string `json:",omitempty"` // batch entries only
		MessageId              string
		MD5OfMessageBody       string
		MD5OfMessageAttributes string `json:",omitempty"`
		SequenceNumber         string `json:",omitempty"`
	}
	batchError struct {
		Id          string
		Code        string
		Message     string
		SenderFault bool
	}
	receivedMessage struct {
		MessageId              string
		ReceiptHandle          string
		MD5OfBody              string
		Body                   string
		Attributes             map[string]string    `json:",omitempty"`
		MD5OfMessageAttributes string               `json:",omitempty"`
		MessageAttributes      map[string]Attribute `json:",omitempty"`
	}
)

func (s *Server) createQueue(req *request) (any, error) {
	q, err := s.newQueue(req.QueueName, req.Attributes)
	if err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if old := s.queues[q.name]; old != nil {
		if !maps.Equal(old.attrs, q.attrs) {
			return nil, queueNameExists.with("A queue already exists with the same name and a different value for attribute(s).")
		}
		return queueURLOutput{old.url}, nil
	}
	s.queues[q.name] = q
	return queueURLOutput{q.url}, nil
}

func (s *Server) getQueueURL(name string) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	return queueURLOutput{q.url}, nil
}

func (s *Server) getQueueAttributes(name string, names []string) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	now := s.now()
	var visible, hidden, delayed int
	for _, m := range q.msgs {
		switch {
		case m.deleted:
		case !now.Before(m.visibleAt):
			visible++
		case m.ReceiveCount > 0:
			hidden++
		default:
			delayed++
		}
	}
	all := maps.Clone(q.attrs)
	if all == nil {
		all = map[string]string{}
	}
	for k, v := range map[string]int{
		"ApproximateNumberOfMessages":           visible,
		"ApproximateNumberOfMessagesNotVisible": hidden,
		"ApproximateNumberOfMessagesDelayed":    delayed,
		"VisibilityTimeout":                     int(q.visibility / time.Second),
		"DelaySeconds":                          int(q.delay / time.Second),
		"MaximumMessageSize":                    q.maxSize,
		"CreatedTimestamp":                      int(q.created.Unix()),
	} {
		all[k] = strconv.Itoa(v)
	}
	all["QueueArn"] = "arn:aws:sqs:us-east-1:" + s.account + ":" + q.name
	out := map[string]string{}
	for _, n := range names {
		if n == "All" {
			out = all
			break
		}
		if v, ok := all[n]; ok {
			out[n] = v
		}
	}
	return struct{ Attributes map[string]string }{out}, nil
}

func (s *Server) sendMessage(name string, e *entry) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	dedupID, err := q.validate(e)
	if err != nil {
		return nil, err
	}
	id, seq := q.add(s.now(), e, dedupID)
	return sent(e, id, seq), nil
}

// sent builds the response for an accepted message.
func sent(e *entry, msgID, sequence string) sendOutput {
	return sendOutput{Id: e.Id, MessageId: msgID, SequenceNumber: sequence,
		MD5OfMessageBody: md5Hex([]byte(*e.MessageBody)), MD5OfMessageAttributes: attributesMD5(e.MessageAttributes)}
}

var batchEntryID = regexp.MustCompile(`^[A-Za-z0-9_-]{1,80}$`)

// checkBatch validates what SQS checks for a whole batch request.
func checkBatch(entries []entry) error {
	if len(entries) == 0 {
		return emptyBatch.with("There should be at least one entry in the request.")
	}
	if len(entries) > maxBatchEntries {
		return tooManyEntries.with("Maximum number of entries per request are 10. You have sent " + strconv.Itoa(len(entries)) + ".")
	}
	seen := map[string]bool{}
	for _, e := range entries {
		if !batchEntryID.MatchString(e.Id) {
			return invalidEntryID.with("A batch entry id can only contain alphanumeric characters, hyphens and underscores. It can be at most 80 letters long.")
		}
		if seen[e.Id] {
			return idsNotDistinct.with("Id " + e.Id + " repeated.")
		}
		seen[e.Id] = true
	}
	return nil
}

func (s *Server) sendMessageBatch(name string, entries []entry) (any, error) {
	if err := checkBatch(entries); err != nil {
		return nil, err
	}
	s.mu.Lock()
	hook := s.entryFaults[name]
	s.mu.Unlock()
	injected := make([]*Fault, len(entries))
	if hook != nil { // user code runs without the lock
		for i, e := range entries {
			if f, fail := hook(i, e.Id); fail {
				injected[i] = &f
			}
		}
	}

	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	total := 0
	for _, e := range entries {
		if e.MessageBody != nil {
			total += len(*e.MessageBody)
		}
		for n, a := range e.MessageAttributes {
			total += len(n) + len(a.DataType) + len(a.StringValue) + len(a.BinaryValue)
		}
	}
	if total > q.maxSize {
		return nil, batchTooLong.with("Batch requests cannot be longer than " + strconv.Itoa(q.maxSize) + " bytes. You have sent " + strconv.Itoa(total) + " bytes.")
	}
	out := struct {
		Successful []sendOutput
		Failed     []batchError
	}{[]sendOutput{}, []batchError{}}
	now := s.now()
	for i := range entries {
		e := &entries[i]
		dedupID, err := q.validate(e)
		if f, ok := err.(Fault); ok {
			injected[i] = &f
		}
		if f := injected[i]; f != nil {
			out.Failed = append(out.Failed, batchError{Id: e.Id, Code: f.Code, Message: f.Message, SenderFault: f.Sender})
			continue
		}
		id, seq := q.add(now, e, dedupID)
		out.Successful = append(out.Successful, sent(e, id, seq))
	}
	return out, nil
}

func (s *Server) receiveMessage(ctx context.Context, stop <-chan struct{}, name string, req *request) (any, error) {
	max := req.MaxNumberOfMessages
	if max == 0 {
		max = 1
	}
	if max < 1 || max > 10 {
		return nil, InvalidParameterValue.with("Value " + strconv.Itoa(max) + " for parameter MaxNumberOfMessages is invalid. Reason: Must be between 1 and 10, if provided.")
	}
	deadline := time.Now().Add(min(time.Duration(req.WaitTimeSeconds)*time.Second, maxLongPoll))
	for {
		s.mu.Lock()
		q, err := s.queue(name)
		if err != nil {
			s.mu.Unlock()
			return nil, err
		}
		visibility := q.visibility
		if req.VisibilityTimeout != nil {
			visibility = time.Duration(*req.VisibilityTimeout) * time.Second
		}
		msgs, handles := q.receive(s.now(), max, visibility)
		wake := q.wake
		var out []receivedMessage
		for i, m := range msgs {
			out = append(out, s.render(m, handles[i], req))
		}
		s.mu.Unlock()

		left := time.Until(deadline)
		if len(out) > 0 || left <= 0 || ctx.Err() != nil {
			return struct {
				Messages []receivedMessage `json:",omitempty"`
			}{out}, nil
		}
		select {
		case <-stop:
			return nil, ServiceUnavailable.with("server stopping")
		default:
		}
		wait(ctx, stop, wake, left)
	}
}

// render builds the response form of a received message, with the system
// and message attributes the request asked for. It requires s.mu held.
func (s *Server) render(m *message, handle string, req *request) receivedMessage {
	r := receivedMessage{MessageId: m.ID, ReceiptHandle: handle, Body: m.Body, MD5OfBody: md5Hex([]byte(m.Body))}
	system := map[string]string{
		"SenderId":                         s.account,
		"SentTimestamp":                    strconv.FormatInt(m.SentAt.UnixMilli(), 10),
		"ApproximateReceiveCount":          strconv.Itoa(m.ReceiveCount),
		"ApproximateFirstReceiveTimestamp": strconv.FormatInt(m.firstReceive.UnixMilli(), 10),
	}
	if m.GroupID != "" {
		system["MessageGroupId"] = m.GroupID
	}
	if m.SequenceNumber != "" {
		system["SequenceNumber"], system["MessageDeduplicationId"] = m.SequenceNumber, m.DeduplicationID
	}
	wanted := append(slices.Clone(req.MessageSystemAttributeNames), req.AttributeNames...)
	for k, v := range system {
		if slices.Contains(wanted, "All") || slices.Contains(wanted, k) {
			if r.Attributes == nil {
				r.Attributes = map[string]string{}
			}
			r.Attributes[k] = v
		}
	}
	for k, a := range m.Attributes {
		for _, w := range req.MessageAttributeNames {
			prefix, wildcard := strings.CutSuffix(w, ".*")
			if w == "All" || w == ".*" || w == k || wildcard && strings.HasPrefix(k, prefix+".") {
				if r.MessageAttributes == nil {
					r.MessageAttributes = map[string]Attribute{}
				}
				r.MessageAttributes[k] = a
				break
			}
		}
	}
	r.MD5OfMessageAttributes = attributesMD5(r.MessageAttributes)
	return r
}

func (s *Server) deleteMessage(name, handle string) (any, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	if handle == "" {
		return nil, missingParameter.with("The request must contain the parameter ReceiptHandle.")
	}
	return struct{}{}, q.remove(handle)
}

func (s *Server) deleteMessageBatch(name string, entries []entry) (any, error) {
	if err := checkBatch(entries); err != nil {
		return nil, err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	q, err := s.queue(name)
	if err != nil {
		return nil, err
	}
	type deleted struct{ Id string }
	out := struct {
		Successful []deleted
		Failed     []batchError
	}{[]deleted{}, []batchError{}}
	for _, e := range entries {
		if f, ok := q.remove(e.ReceiptHandle).(Fault); ok {
			out.Failed = append(out.Failed, batchError{Id: e.Id, Code: f.Code, Message: f.Message, SenderFault: f.Sender})
			continue
		}
		out.Successful = append(out.Successful, deleted{e.Id})
	}
	return out, nil
}

func md5Hex(b []byte) string {
	sum := md5.Sum(b)
	return hex.EncodeToString(sum[:])
}

// attributesMD5 returns the digest SQS reports as MD5OfMessageAttributes, or
// "" when there are no attributes. The digest covers the attributes sorted
// by name; each contributes its name, its data type, a transport byte (1 for
// string-valued, 2 for binary-valued) and its value, and every string or
// byte field is preceded by its length as a 4-byte big-endian integer.
func attributesMD5(attrs map[string]Attribute) string {
	if len(attrs) == 0 {
		return ""
	}
	h := md5.New()
	field := func(b []byte) {
		h.Write(binary.BigEndian.AppendUint32(nil, uint32(len(b))))
		h.Write(b)
	}
	for _, name := range slices.Sorted(maps.Keys(attrs)) {
		a := attrs[name]
		field([]byte(name))
		field([]byte(a.DataType))
		if strings.HasPrefix(a.DataType, "Binary") {
			h.Write([]byte{2})
			field(a.BinaryValue)
		} else {
			h.Write([]byte{1})
			field([]byte(a.StringValue))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}
