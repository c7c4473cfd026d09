package sqstest

import (
	"encoding/json"
	"net/http"
)

// Fault is an SQS error response: the server answers with one when a request
// is invalid, and tests inject them per queue with [Server.SetFault] or per
// batch entry with [Server.SetBatchEntryFault].
//
// On the wire a Fault becomes an HTTP status, a JSON body
// {"__type": Type, "message": Message} and the header
// "x-amzn-query-error: Code;Sender" (or ";Receiver"). Because SQS is marked
// query-compatible, the SDK builds its typed error from Type when the type is
// modelled (for example *types.QueueDoesNotExist) and reports Code as the
// error code, so ErrorCode() is the legacy query code exactly as real SQS
// reports it (QueueDoesNotExist answers "AWS.SimpleQueueService.NonExistentQueue").
//
// Fault implements error so the server's handlers can return it.
type Fault struct {
	Status  int    // HTTP status code
	Type    string // shape ID sent as "__type"
	Code    string // query error code sent in x-amzn-query-error
	Sender  bool   // true for a client (Sender) fault, false for Receiver
	Message string // human-readable text sent as "message"

	hang bool // hold the request instead of answering; only Hang sets it
}

// Error describes the fault.
func (f Fault) Error() string { return "sqstest: " + f.Code + ": " + f.Message }

// with returns a copy of f carrying message.
func (f Fault) with(message string) Fault { f.Message = message; return f }

func (f Fault) isZero() bool { return f == Fault{} }

const (
	sqsNS     = "com.amazonaws.sqs#"
	coralNS   = "com.amazon.coral.service#"
	availNS   = "com.amazon.coral.availability#"
	defaultMs = "injected by sqstest"
)

// Faults that tests commonly inject. Their Type, Code and Status follow the
// SQS service model (HTTPError and AWSQueryError traits) where the error is
// modelled, and real SQS answers otherwise.
var (
	// InternalError is a 500 Receiver fault (generic SDK error, code "InternalError").
	InternalError = Fault{Status: 500, Type: coralNS + "InternalFailure", Code: "InternalError", Message: defaultMs}
	// ServiceUnavailable is a 503 Receiver fault (generic, code "ServiceUnavailable").
	ServiceUnavailable = Fault{Status: 503, Type: availNS + "ServiceUnavailableException", Code: "ServiceUnavailable", Message: defaultMs}
	// ThrottlingException is a 400 Sender fault (generic, code "ThrottlingException").
	ThrottlingException = Fault{Status: 400, Type: availNS + "ThrottlingException", Code: "ThrottlingException", Sender: true, Message: defaultMs}
	// RequestThrottled is a 403 Sender fault decoded as *types.RequestThrottled.
	RequestThrottled = Fault{Status: 403, Type: sqsNS + "RequestThrottled", Code: "RequestThrottled", Sender: true, Message: defaultMs}
	// KmsThrottled is decoded as *types.KmsThrottled, code "KMS.ThrottlingException".
	KmsThrottled = Fault{Status: 400, Type: sqsNS + "KmsThrottled", Code: "KMS.ThrottlingException", Sender: true, Message: defaultMs}
	// KmsAccessDenied is decoded as *types.KmsAccessDenied, code "KMS.AccessDeniedException".
	KmsAccessDenied = Fault{Status: 400, Type: sqsNS + "KmsAccessDenied", Code: "KMS.AccessDeniedException", Sender: true, Message: defaultMs}
	// KmsDisabled is decoded as *types.KmsDisabled, code "KMS.DisabledException".
	KmsDisabled = Fault{Status: 400, Type: sqsNS + "KmsDisabled", Code: "KMS.DisabledException", Sender: true, Message: defaultMs}
	// AccessDenied is a 403 Sender fault (generic, code "AccessDenied").
	AccessDenied = Fault{Status: 403, Type: coralNS + "AccessDeniedException", Code: "AccessDenied", Sender: true, Message: defaultMs}
	// InvalidParameterValue is a 400 Sender fault (generic, code "InvalidParameterValue");
	// the server also sends it for a message over the queue's MaximumMessageSize.
	InvalidParameterValue = Fault{Status: 400, Type: coralNS + "InvalidParameterValueException", Code: "InvalidParameterValue", Sender: true, Message: defaultMs}
	// QueueDoesNotExist is decoded as *types.QueueDoesNotExist, code
	// "AWS.SimpleQueueService.NonExistentQueue".
	QueueDoesNotExist = Fault{Status: 400, Type: sqsNS + "QueueDoesNotExist", Code: "AWS.SimpleQueueService.NonExistentQueue", Sender: true, Message: "The specified queue does not exist."}
	// InvalidMessageContents is decoded as *types.InvalidMessageContents; the
	// server also sends it for a body with characters SQS does not allow.
	InvalidMessageContents = Fault{Status: 400, Type: sqsNS + "InvalidMessageContents", Code: "InvalidMessageContents", Sender: true, Message: defaultMs}

	// Hang holds the request without answering until the client gives up
	// (its context ends or it closes the connection), the server stops
	// listening, or the server is closed.
	Hang = Fault{hang: true, Code: "Hang", Message: "request held"}
)

// Faults the server sends for invalid requests; tests may inject them too.
var (
	missingParameter = Fault{Status: 400, Type: coralNS + "MissingRequiredParameterException", Code: "MissingParameter", Sender: true}
	invalidAction    = Fault{Status: 400, Type: coralNS + "UnknownOperationException", Code: "InvalidAction", Sender: true}
	malformedInput   = Fault{Status: 400, Type: coralNS + "SerializationException", Code: "MalformedInput", Sender: true}
	emptyBatch       = Fault{Status: 400, Type: sqsNS + "EmptyBatchRequest", Code: "AWS.SimpleQueueService.EmptyBatchRequest", Sender: true}
	tooManyEntries   = Fault{Status: 400, Type: sqsNS + "TooManyEntriesInBatchRequest", Code: "AWS.SimpleQueueService.TooManyEntriesInBatchRequest", Sender: true}
	idsNotDistinct   = Fault{Status: 400, Type: sqsNS + "BatchEntryIdsNotDistinct", Code: "AWS.SimpleQueueService.BatchEntryIdsNotDistinct", Sender: true}
	batchTooLong     = Fault{Status: 400, Type: sqsNS + "BatchRequestTooLong", Code: "AWS.SimpleQueueService.BatchRequestTooLong", Sender: true}
	invalidEntryID   = Fault{Status: 400, Type: sqsNS + "InvalidBatchEntryId", Code: "AWS.SimpleQueueService.InvalidBatchEntryId", Sender: true}
	handleInvalid    = Fault{Status: 404, Type: sqsNS + "ReceiptHandleIsInvalid", Code: "ReceiptHandleIsInvalid", Sender: true}
	queueNameExists  = Fault{Status: 400, Type: sqsNS + "QueueNameExists", Code: "QueueAlreadyExists", Sender: true}
)

// writeFault sends f as an AWS JSON 1.0 error response.
func writeFault(w http.ResponseWriter, f Fault) {
	side := "Receiver"
	if f.Sender {
		side = "Sender"
	}
	w.Header().Set("x-amzn-query-error", f.Code+";"+side)
	writeJSON(w, f.Status, struct {
		Type    string `json:"__type"`
		Message string `json:"message"`
	}{f.Type, f.Message})
}

// writeJSON sends v as an AWS JSON 1.0 body with the given status.
func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/x-amz-json-1.0")
	w.Header().Set("x-amzn-RequestId", newID())
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v) // the client may be gone; nothing to do then
}
