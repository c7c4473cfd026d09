package harness

import (
	"crypto/rand"
	"encoding/hex"
	"net/url"
	"testing"
)

// RabbitTenant is a vhost and a user of the local RabbitMQ that one test created
// for itself (NewRabbitTenant); the shared broker's guest user and default vhost are
// never changed.
type RabbitTenant struct {
	Vhost, User, Password string
	// URL connects as User to Vhost, on the broker AMQPURL names.
	URL string
}

// NewRabbitTenant creates, with rabbitmqctl on the local broker, a vhost and a user
// with unique names and every permission on the vhost, and deletes both in cleanup
// (deleting the vhost deletes what the test declared in it). The test skips (fails
// under CI=true) when the broker or rabbitmqctl is not there.
func NewRabbitTenant(t testing.TB) RabbitTenant {
	t.Helper()
	base := AMQPURL(t)
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	id := hex.EncodeToString(b)
	r := RabbitTenant{Vhost: "brokerguard-test-vhost-" + id, User: "brokerguard-test-user-" + id, Password: "pw-" + id}
	if _, err := RabbitCtl(t, "-q", "add_vhost", r.Vhost); err != nil {
		Require(t, ServiceRabbitMQ, err)
	}
	t.Cleanup(func() {
		if _, err := RabbitCtl(t, "-q", "delete_vhost", r.Vhost); err != nil {
			t.Errorf("removing the test vhost: %v", err)
		}
	})
	if _, err := RabbitCtl(t, "-q", "add_user", r.User, r.Password); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if _, err := RabbitCtl(t, "-q", "delete_user", r.User); err != nil {
			t.Errorf("removing the test user: %v", err)
		}
	})
	r.Grant(t, ".*", ".*", ".*")
	u, err := url.Parse(base)
	if err != nil {
		t.Fatal(err)
	}
	u.User = url.UserPassword(r.User, r.Password)
	u.Path = "/" + r.Vhost
	r.URL = u.String()
	return r
}

// Grant sets the user's permissions on the vhost: the regular expressions of the
// resources it may configure, write and read ("^$" for none).
func (r RabbitTenant) Grant(t testing.TB, configure, write, read string) {
	t.Helper()
	if _, err := RabbitCtl(t, "-q", "set_permissions", "-p", r.Vhost, r.User, configure, write, read); err != nil {
		t.Fatal(err)
	}
}

// Revoke takes every permission of the user on the vhost away.
func (r RabbitTenant) Revoke(t testing.TB) {
	t.Helper()
	if _, err := RabbitCtl(t, "-q", "clear_permissions", "-p", r.Vhost, r.User); err != nil {
		t.Fatal(err)
	}
}

// WithPassword returns URL with another password, for a login the broker refuses.
func (r RabbitTenant) WithPassword(password string) string {
	u, _ := url.Parse(r.URL)
	u.User = url.UserPassword(r.User, password)
	return u.String()
}
