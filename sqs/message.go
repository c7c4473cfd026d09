package sqs

import (
	"errors"
	"slices"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/sqs/types"

	"github.com/brokerguard/brokerguard/transport"
)

// ErrInvalidMessage is matched (errors.Is) by every *InvalidMessageError.
var ErrInvalidMessage = errors.New("sqs: invalid message")

// InvalidMessageError is a message the publisher refused before sending
// anything, because SQS could not take it as it is.
type InvalidMessageError struct {
	Index  int    // the message's position in the msgs passed to Publish
	Reason string // what is wrong
}

// Error names the message and the reason.
func (e *InvalidMessageError) Error() string {
	return "sqs: message " + strconv.Itoa(e.Index) + ": " + e.Reason
}

// Is reports whether target is ErrInvalidMessage.
func (e *InvalidMessageError) Is(target error) bool { return target == ErrInvalidMessage }

// FromHeader returns a function that reads the value of the first header
// named key, or "" when there is none; use it with WithGroupID or
// WithDeduplicationID.
func FromHeader(key string) func(transport.Message) string {
	return func(m transport.Message) string {
		for _, h := range m.Headers {
			if h.Key == key {
				return string(h.Value)
			}
		}
		return ""
	}
}

// Headers turns message attributes received from SQS back into headers,
// sorted by key: a String or Number attribute gives its StringValue, a Binary
// one its BinaryValue.
func Headers(attrs map[string]types.MessageAttributeValue) []transport.Header {
	hs := make([]transport.Header, 0, len(attrs))
	for k, v := range attrs {
		value := v.BinaryValue
		if v.StringValue != nil {
			value = []byte(*v.StringValue)
		}
		hs = append(hs, transport.Header{Key: k, Value: value})
	}
	slices.SortFunc(hs, func(a, b transport.Header) int { return strings.Compare(a.Key, b.Key) })
	return hs
}

// Data types of the attributes made from headers.
var (
	dataString = aws.String("String")
	dataBinary = aws.String("Binary")
)

// entry converts message i for queue q into a batch entry (without its Id) and
// returns the size SQS counts for it; id is the message's own id
// (transport.MessageIDs), "" when it has none.
func (p *Publisher) entry(q queue, i int, m transport.Message, id string) (types.SendMessageBatchRequestEntry, int, error) {
	body := string(m.Value)
	e := types.SendMessageBatchRequestEntry{MessageBody: &body}
	size := len(body)
	if len(m.Headers) > 0 {
		e.MessageAttributes = make(map[string]types.MessageAttributeValue, len(m.Headers))
		for _, h := range m.Headers {
			switch {
			case h.Key == "":
				return e, 0, &InvalidMessageError{Index: i, Reason: "a header has no key"}
			case len(h.Value) == 0:
				return e, 0, &InvalidMessageError{Index: i, Reason: "header " + strconv.Quote(h.Key) + " is empty; SQS refuses empty attribute values"}
			}
			if _, dup := e.MessageAttributes[h.Key]; dup {
				return e, 0, &InvalidMessageError{Index: i, Reason: "header " + strconv.Quote(h.Key) + " is repeated; SQS attributes are unique"}
			}
			var v types.MessageAttributeValue
			if isText(h.Value) {
				v = types.MessageAttributeValue{DataType: dataString, StringValue: aws.String(string(h.Value))}
				size += len("String")
			} else {
				v = types.MessageAttributeValue{DataType: dataBinary, BinaryValue: h.Value}
				size += len("Binary")
			}
			e.MessageAttributes[h.Key] = v
			size += len(h.Key) + len(h.Value)
		}
	}
	if q.fifo {
		group := p.groupID(m)
		if group == "" {
			return e, 0, &InvalidMessageError{Index: i, Reason: "no message group ID for FIFO queue " + strconv.Quote(q.name)}
		}
		e.MessageGroupId = &group
		if p.dedupID != nil {
			if own := p.dedupID(m); own != "" {
				id = own
			}
		}
		if id != "" {
			e.MessageDeduplicationId = &id
		}
	}
	return e, size, nil
}

// isText reports whether b is text SQS accepts in a String attribute or a
// body: valid UTF-8 of tab, line feed, carriage return and the characters
// from U+0020 on, except surrogates, U+FFFE and U+FFFF.
func isText(b []byte) bool {
	for len(b) > 0 {
		r, n := utf8.DecodeRune(b)
		if r == utf8.RuneError && n == 1 {
			return false
		}
		if !(r == '\t' || r == '\n' || r == '\r' || r >= 0x20 && r <= 0xD7FF || r >= 0xE000 && r <= 0xFFFD || r >= 0x10000) {
			return false
		}
		b = b[n:]
	}
	return true
}

// entryIDs are the Ids of a batch's entries: their positions in the chunk.
var entryIDs = [maxBatchEntries]string{"0", "1", "2", "3", "4", "5", "6", "7", "8", "9"}

// chunkEnd returns the end of the chunk that starts at sizes[start:]: at most
// maxBatchEntries entries whose sizes add up to at most maxBytes, and at
// least one entry.
func chunkEnd(sizes []int, start, maxBytes int) int {
	end, total := start, 0
	for end < len(sizes) && end-start < maxBatchEntries {
		if end > start && total+sizes[end] > maxBytes {
			break
		}
		total += sizes[end]
		end++
	}
	return end
}
