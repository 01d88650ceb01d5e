package reserve

import "sync"

// horizons remembers, per key, the latest slot Redis granted this Limiter
// (server clock, Unix ns), also through leases and holds, which do not
// return the key's state: if Redis fails, the key's local state starts no
// earlier, so local slots never come on top of Redis slots still to be
// used.
type horizons struct {
	mu sync.Mutex
	at map[string]horizon
}

type horizon struct {
	slotNS int64
	spec   *spec // the policy of the reservation
}

func (h *horizons) note(key string, slotNS int64, s *spec) {
	h.mu.Lock()
	if h.at == nil {
		h.at = make(map[string]horizon)
	}
	if slotNS > h.at[key].slotNS {
		h.at[key] = horizon{slotNS, s}
	}
	h.mu.Unlock()
}

func (h *horizons) get(key string) int64 {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.at[key].slotNS
}

// ahead returns the keys whose latest slot lies after nowNS, and their
// policies.
func (h *horizons) ahead(nowNS int64) map[string]*spec {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := make(map[string]*spec)
	for k, v := range h.at {
		if v.slotNS > nowNS {
			out[k] = v.spec
		}
	}
	return out
}

// sweep forgets slots that have passed.
func (h *horizons) sweep(nowNS int64) {
	h.mu.Lock()
	defer h.mu.Unlock()
	for k, v := range h.at {
		if v.slotNS <= nowNS {
			delete(h.at, k)
		}
	}
}
