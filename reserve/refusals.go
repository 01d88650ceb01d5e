package reserve

import (
	"strconv"
	"strings"
	"time"
)

// Refusals remembered: for a policy and cost on a key, the earliest slot
// Redis last said a refused request would have had (a field of the key's
// state, keys.go). A request with a maximum wait that ends before it is
// refused here, without a Redis call: a caller looping on a queue longer
// than its deadline (Wait with a context that ends too soon, TryReserveN)
// otherwise costs a script call per try (86k calls in 2.6 s were measured:
// issue 21, finding 17). The earliest slot only moves later as others
// reserve; it moves earlier only through cancels, settles that give back,
// resumes and raised limits, so an entry is trusted for refusalTTL at most,
// and this Limiter's own cancels and settles on the key, and a resume it
// hears of, drop them all.

type refusal struct {
	earliest time.Time // the slot the request would have had, on the Limiter's clock
	at       time.Time // when Redis said so
	band     string    // the binding band of that slot
}

const (
	refusalTTL = 100 * time.Millisecond
	// maxRefusals bounds one key's refusals (policies and costs).
	maxRefusals = 64
)

func refusalKey(s *spec, amounts []float64) string {
	var b strings.Builder
	b.WriteString(s.sig)
	for _, a := range amounts {
		b.WriteByte(0)
		b.WriteString(strconv.FormatFloat(a, 'g', -1, 64))
	}
	return b.String()
}

// refuse records that the request for amounts would have had its slot at
// earliest, set by band, as Redis said at now. ks.mu is held.
func (ks *keyState) refuse(s *spec, amounts []float64, earliest, now time.Time, band string) {
	if ks.refused == nil || len(ks.refused) >= maxRefusals {
		ks.refused = make(map[string]refusal)
	}
	ks.refused[refusalKey(s, amounts)] = refusal{earliest, now, band}
}

// refused returns the wait a request with maxWait (>= 0) would have and
// its binding band, and true, when it is sure to be refused at now.
// ks.mu is held.
func (ks *keyState) refusedAt(s *spec, amounts []float64, maxWait time.Duration, now time.Time) (time.Duration, string, bool) {
	if len(ks.refused) == 0 {
		return 0, "", false
	}
	k := refusalKey(s, amounts)
	e, ok := ks.refused[k]
	if !ok {
		return 0, "", false
	}
	if now.Sub(e.at) > refusalTTL || now.Before(e.at) {
		delete(ks.refused, k)
		return 0, "", false
	}
	wait := e.earliest.Sub(now)
	return wait, e.band, wait > maxWait
}

// forgetRefusals drops what is remembered (a cancel, a settle or a resume
// may have made room). ks.mu is held.
func (ks *keyState) forgetRefusals() { clear(ks.refused) }
