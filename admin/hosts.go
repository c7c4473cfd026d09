package admin

import (
	"errors"
	"net"
	"net/http"
	"os"
	"strings"
)

// WithAllowedHosts adds names to the hosts whose requests the handler answers (the
// Host header, port aside). A name may start with "*." to allow its subdomains;
// "*" alone allows every host and turns the protection off (for a handler behind a
// proxy that checks Host itself).
//
// Every route checks the Host, the read routes too: a page on another site can make
// the operator's browser resolve its own name to the admin port (DNS rebinding) and
// read the answers as same-origin. Without this option the handler answers
// loopback names (localhost, *.localhost), IP addresses (which no rebinding can
// use) and this machine's host name; a service reached by another name, such as a
// Kubernetes service or a load balancer's, must list it here.
func WithAllowedHosts(names ...string) Option {
	return func(h *Handler) error {
		for _, n := range names {
			n = strings.ToLower(strings.TrimSuffix(n, "."))
			if n == "" || strings.ContainsAny(n, "/: ") && net.ParseIP(strings.Trim(n, "[]")) == nil {
				return errors.New("admin: WithAllowedHosts: " + quoteName(n) + " is not a host name (give it without scheme or port)")
			}
			h.hosts = append(h.hosts, n)
		}
		return nil
	}
}

func quoteName(s string) string { return `"` + s + `"` }

// defaultHosts are the names answered without WithAllowedHosts, besides IP addresses.
func defaultHosts() []string {
	names := []string{"localhost", "*.localhost"}
	if host, err := os.Hostname(); err == nil && host != "" {
		host = strings.ToLower(host)
		names = append(names, host)
		if short, _, ok := strings.Cut(host, "."); ok {
			names = append(names, short)
		}
	}
	return names
}

// hostAllowed reports whether the request's Host header names this handler.
func (h *Handler) hostAllowed(r *http.Request) bool {
	host := r.Host
	if hh, _, err := net.SplitHostPort(host); err == nil {
		host = hh
	}
	host = strings.ToLower(strings.Trim(host, "[]"))
	if net.ParseIP(host) != nil {
		return true
	}
	// A name may end with the root's dot; an address may not ("::0." is no address).
	if host = strings.TrimSuffix(host, "."); host == "" {
		return false
	}
	for _, n := range h.hosts {
		switch {
		case n == "*", n == host:
			return true
		case strings.HasPrefix(n, "*.") && strings.HasSuffix(host, n[1:]):
			return true
		}
	}
	return false
}
