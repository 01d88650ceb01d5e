package reserve

import "testing"

// TestRedisHandOffWhileOnTheStore: while the local fallback's store holds
// a key's seats, a seat Redis hands to one of this Limiter's waiting
// tickets (an event, or a reply's hand-offs) is not used: the store counts
// the Limiter's seats against its share of N, and Redis's seat is in no
// share. The store's own hand-offs are. Before, the combination runner's
// seed 21 had 5 calls open on a band of 4: a release Redis ran late, after
// a 3.6 s CLIENT PAUSE, handed a seat to a ticket of a member pacing
// locally on a share its store had full.
func TestRedisHandOffWhileOnTheStore(t *testing.T) {
	l := &Limiter{clock: systemClockValue}
	ks := l.states.get("k")
	ticket := func(id string) *seatTicket {
		tk := &seatTicket{id: id, key: "k", n: 4, cost: 1, state: seatWaiting, got: make(chan struct{})}
		ks.mu.Lock()
		ks.seatsOf().tickets[id] = tk
		ks.seatsOf().store = true
		ks.mu.Unlock()
		return tk
	}
	a, b, c := ticket("x.1"), ticket("x.2"), ticket("x.3")
	reply := func(id string) any { return []any{int64(1), int64(0), id} }

	l.onSeatEvent("k", a.id)
	ks.mu.Lock()
	l.handedOff(ks, reply(b.id), 2, true)
	granted, queued, err := l.noteAcquireLocked(ks, c, []any{int64(1), int64(0), int64(0), int64(4), int64(0), int64(0)}, false)
	ks.mu.Unlock()
	for _, tk := range []*seatTicket{a, b, c} {
		if tk.state == seatHeld {
			t.Errorf("ticket %s holds a seat Redis handed it while the key's seats are on the store", tk.id)
		}
	}
	if err != nil || granted || !queued {
		t.Errorf("Redis's grant while on the store: granted %v, queued %v, err %v; want the ticket waiting", granted, queued, err)
	}

	// The store's hand-off is the share's: used.
	ks.mu.Lock()
	l.handedOff(ks, reply(a.id), 2, false)
	ks.mu.Unlock()
	if a.state != seatHeld {
		t.Error("the store's hand-off was not used")
	}
	// Back on Redis (the store handed back), Redis's hand-offs are used.
	ks.mu.Lock()
	ks.seats.store = false
	ks.mu.Unlock()
	l.onSeatEvent("k", b.id)
	if b.state != seatHeld {
		t.Error("Redis's hand-off was not used on Redis")
	}
}
