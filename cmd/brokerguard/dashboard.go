package main

import (
	"context"
	"crypto/rand"
	"fmt"
	"io"
	"net"
	"net/http"
	"sync"
	"time"

	"github.com/brokerguard/brokerguard/admin"
	"github.com/brokerguard/brokerguard/registry"
	"github.com/brokerguard/brokerguard/transport"
)

// webServers starts one HTTP server per address the flags name, so --http and
// --metrics given the same address share one listener (/admin/ and /metrics on one
// port). The zero value is ready to use; close stops every server.
type webServers struct {
	byAddr  map[string]*webServer
	servers []*http.Server
}

// serverTimeouts bound what one connection may hold of the demo's server: its
// headers, the whole request, the answer, and the wait between requests. Without
// them a client that holds back its body or keeps idle connections keeps them open
// for ever. (A variable so that tests can shorten them.)
var serverTimeouts = struct{ header, read, write, idle time.Duration }{5 * time.Second, 10 * time.Second, 30 * time.Second, time.Minute}

// newHTTPServer returns the server the demo's --http and --metrics listeners use.
func newHTTPServer(h http.Handler) *http.Server {
	t := serverTimeouts
	return &http.Server{Handler: h, ReadHeaderTimeout: t.header, ReadTimeout: t.read, WriteTimeout: t.write,
		IdleTimeout: t.idle, MaxHeaderBytes: 64 << 10}
}

type webServer struct {
	mux  *http.ServeMux
	base string // "http://host:port", the address a person can open
}

// mux returns the mux served on addr, listening on first use; flag names the flag in
// errors.
func (w *webServers) mux(flag, addr string) (mux *http.ServeMux, base string, err error) {
	if s, ok := w.byAddr[addr]; ok {
		return s.mux, s.base, nil
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, "", fmt.Errorf("%s: %w", flag, err)
	}
	s := &webServer{mux: http.NewServeMux(), base: "http://" + openable(ln.Addr())}
	srv := newHTTPServer(s.mux)
	go srv.Serve(ln)
	if w.byAddr == nil {
		w.byAddr = map[string]*webServer{}
	}
	w.byAddr[addr] = s
	w.servers = append(w.servers, srv)
	return s.mux, s.base, nil
}

func (w *webServers) close() {
	for _, srv := range w.servers {
		srv.Close()
	}
}

// openable is addr as a browser can open it: a listener on every interface ("[::]:8080")
// is reachable at the loopback address.
func openable(addr net.Addr) string {
	tcp, ok := addr.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return addr.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}

// serveDashboard serves the admin handler for reg under /admin/ on addr, with the
// journal's transitions and the outbox's backlog, and mutations on behind a token made
// for this run and printed once, so the person watching can hold circuits open or
// closed from the page. Every mutation is printed as it happens, and the holds are
// recorded in held.
func serveDashboard(web *webServers, addr string, reg *registry.Registry, journal *admin.Journal, backlog admin.Outbox, held *holds, out io.Writer) error {
	token := rand.Text()
	h, err := admin.New(reg, admin.WithJournal(journal), admin.WithOutbox(backlog), admin.WithMutations(token),
		admin.WithAudit(func(_ context.Context, e admin.AuditEvent) {
			held.record(e)
			if e.Err != "" {
				fmt.Fprintf(out, "dashboard: %s %s refused: %s\n", e.Action, e.Destination, e.Err)
			} else if e.Until.IsZero() {
				fmt.Fprintf(out, "dashboard: %s %s\n", e.Action, e.Destination)
			} else {
				fmt.Fprintf(out, "dashboard: %s %s until %s\n", e.Action, e.Destination, e.Until.Format(time.TimeOnly))
			}
		}))
	if err != nil {
		return err
	}
	mux, base, err := web.mux("--http", addr)
	if err != nil {
		return err
	}
	mux.Handle("/admin/", http.StripPrefix("/admin", h))
	mux.Handle("GET /{$}", http.RedirectHandler("/admin/", http.StatusFound))
	// The token is not put in the link: a visited URL, fragment included, stays in the
	// browser's history. The page takes it in a password field and keeps it nowhere else.
	fmt.Fprintf(out, "dashboard: %s/admin/ token %s (paste the token into the page to force circuits open or closed)\n", base, token)
	return nil
}

// holds remembers when the holds set open on the dashboard end. The outbox defers a
// destination's rows until its circuit's NotBefore, which for a hold is the hold's end,
// and clearing the hold early does not bring them back sooner: the demo's drain cannot
// publish them, and the summary reports them as held, not lost. It is safe for
// concurrent use; the zero value has no holds.
type holds struct {
	mu  sync.Mutex
	end map[string]time.Time // by destination; the latest end of a hold set open
}

func (h *holds) record(e admin.AuditEvent) {
	if e.Action != "force-open" || e.Err != "" {
		return
	}
	d, err := transport.ParseDestination(e.Destination)
	if err != nil {
		return
	}
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.end == nil {
		h.end = map[string]time.Time{}
	}
	if e.Until.After(h.end[d.String()]) {
		h.end[d.String()] = e.Until
	}
}

// until returns when the outbox stops deferring d's rows because of a hold, if that is
// after now.
func (h *holds) until(d transport.Destination, now time.Time) (time.Time, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	end, ok := h.end[d.String()]
	return end, ok && end.After(now)
}
