package admin

import (
	"context"

	"github.com/brokerguard/brokerguard/internal/safetext"
)

// maxAuditField bounds each text field of an AuditEvent.
const maxAuditField = 256

// auditText makes a request's text safe for any log: control characters escaped (a
// newline or ESC in a path could otherwise forge a line or clear a terminal) and
// bounded.
func auditText(s string) string { return safetext.Truncate(safetext.Escape(s), maxAuditField) }

// report hands ev to the audit hook with every text field made safe by auditText: its
// action and destination come from the request path, refused requests included.
func (h *Handler) report(ctx context.Context, ev AuditEvent) {
	if h.audit == nil {
		return
	}
	for _, f := range []*string{&ev.Action, &ev.Destination, &ev.Reason, &ev.Remote, &ev.Err, &ev.DeadReason, &ev.Author} {
		*f = auditText(*f)
	}
	h.audit(ctx, ev)
}
