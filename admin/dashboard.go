package admin

import (
	_ "embed"
	"net/http"
)

// dashboardHTML is the whole dashboard: one page with its CSS and JavaScript inline,
// talking to the JSON API by relative URLs so it works wherever the handler is mounted.
//
//go:embed dashboard.html
var dashboardHTML []byte

func (h *Handler) dashboard(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	// The page loads nothing from elsewhere; say so to the browser too.
	w.Header().Set("Content-Security-Policy",
		"default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; connect-src 'self'; img-src data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	_, _ = w.Write(dashboardHTML)
}
