package reserve

import (
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// refusals remembers, per key, policy and cost, the earliest slot Redis
// last said a refused request would have had: a request with a maximum
// wait that ends before it is refused here, without a Redis call. A caller
// looping on a queue longer than its deadline (Wait with a context that
// ends too soon, TryReserveN) otherwise costs a script call per try: 86k
// calls in 2.6 s were measured (issue 21, finding 17). The earliest slot
// only moves later as others reserve; it moves earlier only through
// cancels, settles that give back, resumes and raised limits, so an entry
// is trusted for refusalTTL at most, and this Limiter's own cancels and
// settles on the key drop it.
type refusals struct {
	mu sync.Mutex
	m  map[string]refusal
	n  atomic.Int64 // len(m): a Limiter with none remembered skips the key's formatting
}

type refusal struct {
	earliest time.Time // the slot the request would have had, on the Limiter's clock
	at       time.Time // when Redis said so
	band     string    // the binding band of that slot
}

const (
	refusalTTL  = 100 * time.Millisecond
	maxRefusals = 4096
)

func refusalKey(key string, s *spec, amounts []float64) string {
	var b strings.Builder
	b.WriteString(key)
	b.WriteByte(0)
	b.WriteString(s.sig)
	for _, a := range amounts {
		b.WriteByte(0)
		b.WriteString(strconv.FormatFloat(a, 'g', -1, 64))
	}
	return b.String()
}

// note records that the request for amounts on key would have had its slot
// at earliest, set by band, as Redis said at now.
func (r *refusals) note(key string, s *spec, amounts []float64, earliest, now time.Time, band string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.m == nil || len(r.m) >= maxRefusals {
		r.m = make(map[string]refusal)
	}
	r.m[refusalKey(key, s, amounts)] = refusal{earliest, now, band}
	r.n.Store(int64(len(r.m)))
}

// check returns the wait a request with maxWait (>= 0) would have and its
// binding band, and true, when it is sure to be refused at now.
func (r *refusals) check(key string, s *spec, amounts []float64, maxWait time.Duration, now time.Time) (time.Duration, string, bool) {
	if r.n.Load() == 0 {
		return 0, "", false
	}
	k := refusalKey(key, s, amounts)
	r.mu.Lock()
	defer r.mu.Unlock()
	e, ok := r.m[k]
	if !ok {
		return 0, "", false
	}
	if now.Sub(e.at) > refusalTTL || now.Before(e.at) {
		delete(r.m, k)
		r.n.Store(int64(len(r.m)))
		return 0, "", false
	}
	wait := e.earliest.Sub(now)
	return wait, e.band, wait > maxWait
}

// forget drops what is remembered of key (a cancel or settle of this
// Limiter's on it may have made room).
func (r *refusals) forget(key string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for k := range r.m {
		if strings.HasPrefix(k, key+"\x00") {
			delete(r.m, k)
		}
	}
	r.n.Store(int64(len(r.m)))
}
