package backend

import (
	"crypto/sha256"
	"encoding/hex"
	"math"
	"strconv"

	"github.com/brokerguard/brokerguard/breaker"
)

// Fingerprint returns a stable digest of every field of p that changes behaviour, after
// normalization. Replicas sharing one circuit compare fingerprints so that they never
// run one state machine under two policies.
func Fingerprint(p breaker.Policy) string {
	n := Normalize(p)
	// A fixed field order and integer encodings keep the digest stable across
	// releases. A field added later must be appended only when it differs from its
	// zero value, so that the digests of existing policies do not change.
	b := make([]byte, 0, 256)
	b = append(b, "brokerguard.policy.v1"...)
	for _, v := range []int64{
		int64(n.FailureThreshold), int64(n.BreakDuration), int64(n.FailureWindow),
		int64(n.MinimumCalls), int64(math.Float64bits(n.FailureRatio)), int64(n.SlowCallDuration),
		int64(n.HalfOpenMaxProbes), int64(n.SuccessesToClose), int64(n.ProbeLease),
		int64(n.HalfOpenRetryDelay), int64(n.MaxBreakDuration), int64(math.Float64bits(n.Jitter)),
		int64(n.MaxInFlight), int64(n.Scope),
	} {
		b = append(b, '|')
		b = strconv.AppendInt(b, v, 10)
	}
	if n.Mode != breaker.Enforce {
		b = append(b, "|mode="...)
		b = strconv.AppendInt(b, int64(n.Mode), 10)
	}
	if n.RampDuration > 0 {
		b = append(b, "|ramp="...)
		for i, v := range []int64{int64(n.RampDuration), int64(math.Float64bits(n.RampFloor)), int64(math.Float64bits(n.RampAggression))} {
			if i > 0 {
				b = append(b, ',')
			}
			b = strconv.AppendInt(b, v, 10)
		}
	}
	if n.SlowCallRatio != 0 {
		b = append(b, "|slowratio="...)
		b = strconv.AppendInt(b, int64(math.Float64bits(n.SlowCallRatio)), 10)
	}
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:16])
}
