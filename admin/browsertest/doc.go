// Package browsertest drives the admin dashboard in a real headless Chromium. It is a
// module of its own so that its browser-automation dependencies stay out of what users
// of brokerguard download; `make test` runs it.
package browsertest
