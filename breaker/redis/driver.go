package redisstate

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/brokerguard/brokerguard/breaker"
	"github.com/brokerguard/brokerguard/breaker/sharedstate"
)

// Defaults of the driver options.
const (
	DefaultKeyPrefix = "brokerguard:circuit:"
	DefaultTTL       = 24 * time.Hour
)

// Hash fields of a circuit's key (see the package documentation).
const (
	fieldRecord      = "record"
	fieldVersion     = "version"
	fieldFailures    = "failures"
	fieldState       = "state"
	fieldGeneration  = "generation"
	fieldFingerprint = "fingerprint"
	fieldOverride    = "override"
)

// Driver keeps shared circuit records in Redis, one hash per circuit identity, and
// changes them only with Lua scripts, each one atomic step on one key. It implements
// sharedstate.Driver, sharedstate.Counter and (for operators' tools) sharedstate.Lister. It is safe for concurrent use; create it
// with NewDriver.
type Driver struct {
	client redis.Scripter
	prefix string
	ttl    time.Duration
}

var (
	_ sharedstate.Driver  = (*Driver)(nil)
	_ sharedstate.Counter = (*Driver)(nil)
	_ sharedstate.Lister  = (*Driver)(nil)
)

// NewDriver returns a driver that keeps records through client: a *redis.Client, a
// *redis.ClusterClient (every script touches one key, hence one hash slot), a
// *redis.Ring or a failover client, made with ContextTimeoutEnabled: true (else
// NewDriver refuses it), so that the circuit's I/O timeout bounds every request. Of
// the options it reads WithKeyPrefix and WithTTL only.
// New makes a driver for each circuit; use NewDriver to run the driver alone (for
// example, circuittest.TestDriver).
func NewDriver(client redis.Scripter, opts ...Option) (*Driver, error) {
	_, _, keys, err := apply(opts)
	if err != nil {
		return nil, fmt.Errorf("redisstate: %w", err)
	}
	return newDriver(client, keys)
}

func newDriver(client redis.Scripter, keys keyOptions) (*Driver, error) {
	if client == nil {
		return nil, errors.New("redisstate: nil Redis client")
	}
	if ignoresDeadlines(client) {
		return nil, errors.New("redisstate: the Redis client's ContextTimeoutEnabled is false: on a hung server " +
			"its requests would wait ReadTimeout, past the circuit's I/O timeout and the caller's deadline; " +
			"set ContextTimeoutEnabled: true in its options")
	}
	return &Driver{client: client, prefix: keys.prefix, ttl: keys.ttl}, nil
}

// ignoresDeadlines reports whether client is a go-redis client made without
// ContextTimeoutEnabled, which bounds its socket reads and writes by ReadTimeout and
// WriteTimeout only, never by the request's context.
func ignoresDeadlines(client redis.Scripter) bool {
	switch c := client.(type) {
	case *redis.Client:
		return !c.Options().ContextTimeoutEnabled
	case *redis.ClusterClient:
		return !c.Options().ContextTimeoutEnabled
	case *redis.Ring:
		return !c.Options().ContextTimeoutEnabled
	}
	return false
}

// Key returns the Redis key that holds the record of id.
func (d *Driver) Key(id string) string { return d.prefix + "{" + id + "}" }

// The scripts. Each touches only KEYS[1]. Numbers that may exceed 2^53 (versions and
// generations start at a Unix time in nanoseconds) are compared as decimal strings
// and changed only with HINCRBY, never through Lua's floating-point numbers. Every
// write stores ARGV[1], a random token, among the key's last few ("ops"): a client
// that sends the same write again after losing its reply finds its token and is told
// the write was done, instead of applying it twice or seeing a conflict.
//
// The prelude of every script: keepAlive extends the key's time to live to ARGV[2]
// milliseconds, never shortening it; done says whether the write with token ARGV[1]
// was applied already; remember records that it was. "ops" keeps the last 16 tokens
// (32 hex digits and a space each: 528 characters).
var prelude = `
local function keepAlive()
	local ttl = tonumber(ARGV[2])
	if redis.call('PTTL', KEYS[1]) < ttl then
		redis.call('PEXPIRE', KEYS[1], ttl)
	end
end
local function ops()
	if redis.call('HSTRLEN', KEYS[1], 'ops') > 528 then return '' end
	return redis.call('HGET', KEYS[1], 'ops') or ''
end
local function done()
	return string.find(ops(), ARGV[1], 1, true) ~= nil
end
local function remember()
	redis.call('HSET', KEYS[1], 'ops', string.sub(ARGV[1] .. ' ' .. ops(), 1, 528))
end
` + readFields

// readFields is the part of the prelude that reads a record: readFields returns the
// record's fields and values as a flat list (empty when the key does not exist), or
// {tooLarge, field, size} for the first field larger than its bound, without reading
// it. Only the fields a record has are read, so whatever else a key holds costs a
// replica nothing. The bounds are checked by the server, before any byte of the field
// reaches the client (a 36 MiB record would cost every replica 200 MiB to decode).
var readFields = `
local fieldBounds = {` + luaBounds() + `}
local function readFields()
	if redis.call('EXISTS', KEYS[1]) == 0 then return {} end
	local out = {}
	for _, b in ipairs(fieldBounds) do
		local n = redis.call('HSTRLEN', KEYS[1], b[1])
		if n > b[2] then return {'` + tooLarge + `', b[1], n} end
		local v = redis.call('HGET', KEYS[1], b[1])
		if v then
			out[#out + 1] = b[1]
			out[#out + 1] = v
		end
	end
	return out
end
`

// tooLarge marks readFields' answer for a field over its bound; it cannot be a field name
// the driver writes.
const tooLarge = "!too-large"

// MaxFieldSize bounds each field of a circuit's hash but the record (a number, a state
// name, a fingerprint); sharedstate.MaxRecordSize bounds the record's JSON.
const MaxFieldSize = 1024

// luaBounds returns the fields a record has, each with its size bound, as a Lua list.
func luaBounds() string {
	var b strings.Builder
	for _, f := range []string{fieldRecord, fieldVersion, fieldFailures, fieldState, fieldGeneration, fieldFingerprint, fieldOverride} {
		limit := MaxFieldSize
		if f == fieldRecord {
			limit = sharedstate.MaxRecordSize
		}
		fmt.Fprintf(&b, "{'%s', %d}, ", f, limit)
	}
	return b.String()
}

// loadScript returns the key's fields (none when it does not exist) and keeps it alive.
// ARGV: unused token, ttl.
var loadScript = redis.NewScript(prelude + `
local h = readFields()
if #h > 0 then keepAlive() end
return h
`)

// replaceScript writes the fields in ARGV[4..] if the stored version is ARGV[3] (or,
// when ARGV[3] is "0", if the key does not exist). It returns 1 when written (or
// already written by this token), 0 when the condition does not hold.
// ARGV: token, ttl, expected version, field, value, ...
var replaceScript = redis.NewScript(prelude + `
if done() then return 1 end
if ARGV[3] == '0' then
	if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
elseif redis.call('HGET', KEYS[1], 'version') ~= ARGV[3] then
	return 0
end
redis.call('HSET', KEYS[1], unpack(ARGV, 4))
remember()
keepAlive()
return 1
`)

// countScript adds one failure ("add") or resets the count ("reset") of a record that
// is closed in generation ARGV[4] under fingerprint ARGV[5] with no override, when its
// count is below the limit ARGV[6] (and, to reset, above zero). It returns the key's
// fields when written (or already written by this token), nil when the condition does
// not hold. ARGV: token, ttl, mode, generation, fingerprint, limit, closed, none.
var countScript = redis.NewScript(prelude + `
if done() then return readFields() end
local h = redis.call('HMGET', KEYS[1], 'state', 'generation', 'fingerprint', 'override', 'failures')
if h[1] ~= ARGV[7] or h[2] ~= ARGV[4] or h[3] ~= ARGV[5] or h[4] ~= ARGV[8] then return nil end
local failures = tonumber(h[5])
if failures == nil or failures >= tonumber(ARGV[6]) then return nil end
if ARGV[3] == 'add' then
	redis.call('HINCRBY', KEYS[1], 'failures', 1)
else
	if failures <= 0 then return nil end
	redis.call('HSET', KEYS[1], 'failures', 0)
end
redis.call('HINCRBY', KEYS[1], 'version', 1)
remember()
keepAlive()
return readFields()
`)

// token returns a random write token.
func token() string {
	var b [16]byte
	_, _ = rand.Read(b[:]) // crypto/rand.Read never fails on Linux
	return hex.EncodeToString(b[:])
}

// ttlFor returns the time to live, in milliseconds, of a key holding r: the TTL after
// the latest deadline r holds.
func (d *Driver) ttlFor(r sharedstate.Record) int64 {
	latest := time.Now().UnixNano()
	for _, t := range []int64{r.OpenUntil, r.OverrideUntil} {
		latest = max(latest, t)
	}
	for _, l := range r.Leases {
		latest = max(latest, l.Expires)
	}
	return (latest - time.Now().UnixNano() + int64(d.ttl)) / int64(time.Millisecond)
}

// Load returns the record of id, or sharedstate.ErrNotFound, and extends its key's
// time to live.
func (d *Driver) Load(ctx context.Context, id string) (sharedstate.Record, error) {
	v, err := loadScript.Run(ctx, d.client, []string{d.Key(id)}, "", d.ttl.Milliseconds()).Slice()
	if err != nil {
		return sharedstate.Record{}, err
	}
	if len(v) == 0 {
		return sharedstate.Record{}, sharedstate.ErrNotFound
	}
	return d.decode(id, v)
}

// Replace stores next as the record of id if its stored version is expect (or, when
// expect is 0, if it has none), in one script; else sharedstate.ErrConflict.
func (d *Driver) Replace(ctx context.Context, id string, expect uint64, next sharedstate.Record) error {
	rec, err := json.Marshal(next)
	if err != nil {
		return fmt.Errorf("redisstate: encode record of %q: %w", id, err)
	}
	args := []any{token(), d.ttlFor(next), strconv.FormatUint(expect, 10),
		fieldRecord, rec,
		fieldVersion, strconv.FormatUint(next.Version, 10),
		fieldFailures, strconv.FormatInt(next.Failures, 10),
		fieldState, next.State.String(),
		fieldGeneration, strconv.FormatUint(next.Generation, 10),
		fieldFingerprint, next.Fingerprint,
		fieldOverride, next.Override.String(),
	}
	written, err := replaceScript.Run(ctx, d.client, []string{d.Key(id)}, args...).Int()
	switch {
	case err != nil:
		return err
	case written == 0:
		return sharedstate.ErrConflict
	}
	return nil
}

// AddFailure adds one to the failures of the closed record of id, in one script.
func (d *Driver) AddFailure(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return d.count(ctx, id, "add", c)
}

// ResetFailures sets the failures of the closed record of id to zero, in one script.
func (d *Driver) ResetFailures(ctx context.Context, id string, c sharedstate.Closed) (sharedstate.Record, error) {
	return d.count(ctx, id, "reset", c)
}

func (d *Driver) count(ctx context.Context, id, mode string, c sharedstate.Closed) (sharedstate.Record, error) {
	v, err := countScript.Run(ctx, d.client, []string{d.Key(id)}, token(), d.ttl.Milliseconds(), mode,
		strconv.FormatUint(c.Generation, 10), c.Fingerprint, c.Limit,
		breaker.Closed.String(), breaker.NoOverride.String()).Slice()
	switch {
	case errors.Is(err, redis.Nil):
		return sharedstate.Record{}, sharedstate.ErrConflict
	case err != nil:
		return sharedstate.Record{}, err
	}
	return d.decode(id, v)
}

// decode reads a record from HGETALL's flat list of fields and values: the JSON in
// "record", with the version and the failure count (which the counting script changes
// on its own) from their fields. The copies kept for the scripts must agree with it.
func (d *Driver) decode(id string, v []any) (sharedstate.Record, error) {
	if len(v) == 3 && v[0] == tooLarge {
		field, _ := v[1].(string)
		size, _ := v[2].(int64)
		return sharedstate.Record{}, &RecordError{Key: d.Key(id), Field: field,
			Reason: fmt.Sprintf("is %d bytes, more than a record's field may be; delete the key to reset the circuit", size)}
	}
	fields := make(map[string]string, len(v)/2)
	for i := 0; i+1 < len(v); i += 2 {
		k, _ := v[i].(string)
		val, _ := v[i+1].(string)
		fields[k] = val
	}
	fail := func(field, format string, args ...any) (sharedstate.Record, error) {
		return sharedstate.Record{}, &RecordError{Key: d.Key(id), Field: field, Reason: fmt.Sprintf(format, args...)}
	}
	raw, ok := fields[fieldRecord]
	if !ok {
		return fail(fieldRecord, "is missing")
	}
	var r sharedstate.Record
	if err := json.Unmarshal([]byte(raw), &r); err != nil {
		return fail(fieldRecord, "is not a JSON record: %v", err)
	}
	// The scripts compare numbers as strings, so only the canonical form will do.
	var err error
	if r.Version, err = strconv.ParseUint(fields[fieldVersion], 10, 64); err != nil ||
		strconv.FormatUint(r.Version, 10) != fields[fieldVersion] {
		return fail(fieldVersion, "must be an unsigned 64-bit integer in decimal, got %s", shorten(fields[fieldVersion]))
	}
	if r.Failures, err = strconv.ParseInt(fields[fieldFailures], 10, 64); err != nil || r.Failures < 0 ||
		strconv.FormatInt(r.Failures, 10) != fields[fieldFailures] {
		return fail(fieldFailures, "must be a non-negative 64-bit integer in decimal, got %s", shorten(fields[fieldFailures]))
	}
	for _, c := range []struct{ field, want string }{
		{fieldState, r.State.String()},
		{fieldGeneration, strconv.FormatUint(r.Generation, 10)},
		{fieldFingerprint, r.Fingerprint},
		{fieldOverride, r.Override.String()},
	} {
		if got := fields[c.field]; got != c.want {
			return fail(c.field, "is %s but the record says %s; delete the key to reset the circuit", shorten(got), shorten(c.want))
		}
	}
	return r, nil
}

// listCount is the COUNT hint of each SCAN a listing sends: how many keys the server
// looks at per request, so that a listing never blocks it for long.
const listCount = 100

// List implements sharedstate.Lister with SCAN ... MATCH <key prefix>{<prefix>* TYPE
// hash, a page of about listCount keys at a time, on every primary of a cluster or
// shard of a ring. Only keys of the driver's form (its key prefix, the identity in
// braces) are named, each once. It is for operators' tools, never a circuit's
// decision; it needs Redis 6 or later and a client that can SCAN (a *redis.Client,
// *redis.ClusterClient, *redis.Ring or another redis.Cmdable).
func (d *Driver) List(ctx context.Context, prefix string, yield func(id string) error) error {
	// A cluster's primaries are scanned concurrently: yield is called under mu, and
	// not again once it has failed.
	var mu sync.Mutex
	var stopped error
	seen := map[string]bool{}
	head := d.prefix + "{"
	scan := func(ctx context.Context, c redis.Cmdable) error {
		var cursor uint64
		for {
			keys, next, err := c.ScanType(ctx, cursor, globEscape(head+prefix)+"*", listCount, "hash").Result()
			if err != nil {
				return fmt.Errorf("redisstate: list %s*: %w", head+prefix, err)
			}
			for _, k := range keys {
				id, inHead := strings.CutPrefix(k, head)
				id, inBraces := strings.CutSuffix(id, "}")
				if !inHead || !inBraces || !strings.HasPrefix(id, prefix) {
					continue
				}
				mu.Lock()
				if stopped == nil && !seen[id] {
					seen[id] = true
					stopped = yield(id)
				}
				err = stopped
				mu.Unlock()
				if err != nil {
					return err
				}
			}
			if cursor = next; cursor == 0 {
				return nil
			}
		}
	}
	switch c := d.client.(type) {
	case *redis.ClusterClient:
		return c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	case *redis.Ring:
		return c.ForEachShard(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) })
	case redis.Cmdable:
		return scan(ctx, c)
	}
	return fmt.Errorf("redisstate: cannot list circuits through a %T, which cannot SCAN", d.client)
}

// globEscape quotes the characters SCAN's MATCH pattern treats specially.
func globEscape(s string) string {
	var b strings.Builder
	for _, r := range s {
		if strings.ContainsRune(`*?[]\`, r) {
			b.WriteByte('\\')
		}
		b.WriteRune(r)
	}
	return b.String()
}

// shorten quotes a stored value for an error message, cut to its first 64 bytes.
func shorten(v string) string {
	if len(v) > 64 {
		return strconv.Quote(v[:64]) + "... (" + strconv.Itoa(len(v)) + " bytes)"
	}
	return strconv.Quote(v)
}
