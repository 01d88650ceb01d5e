package reserve

import (
	"context"
	"errors"

	"github.com/pacer-go/pacer/internal/layout"
)

// LeaseSlots leases k one-permit slots of lim on key in one lease.lua call
// and returns each slot (Unix ns on the script's clock) and its number, for
// tests. Unless keep, the lease is then dropped (its slots lapse); kept, the
// Limiter hands them out. ok is false when the key is not leasable.
func (l *Limiter) LeaseSlots(ctx context.Context, key string, lim Limit, k int, keep bool) (slots, seqs []int64, ok bool, err error) {
	s, err := l.specOf(lim)
	if err != nil {
		return nil, nil, false, err
	}
	var ls *lease
	for {
		ls, err = l.newLease(ctx, key, s, k, false)
		var ns *noShareError
		if !errors.As(err, &ns) {
			break
		}
		// No share on Redis now (a heartbeat failed or ran late, on a
		// loaded machine): a caller waits for one, as the Limiter's own
		// path does (newLease's callers fall back to reservations, which
		// wait; TestLeaseKeepsLattice failed so in CI beside a hog).
		if err := l.awaitShare(ctx, -1); err != nil {
			return nil, nil, false, err
		}
	}
	if err != nil || ls == nil {
		return nil, nil, false, err
	}
	for i := range ls.k {
		slots = append(slots, ls.slotNS(i))
		seqs = append(seqs, ls.seq0+int64(i))
	}
	if !keep {
		ks := l.states.get(key)
		ks.mu.Lock()
		l.retireLease(ks.leases[s.sig], ls.base.local.Add(ls.allow))
		ks.mu.Unlock()
	}
	return slots, seqs, true, nil
}

// LeaseCounts returns the slots this Limiter leased, handed out and let
// lapse, and those its live leases still hold, for tests.
func (l *Limiter) LeaseCounts() (granted, handed, lapsed, held int64) {
	for _, ks := range l.states.all() {
		ks.mu.Lock()
		for _, slot := range ks.leases {
			for _, ls := range []*lease{slot.live, slot.ahead} {
				if ls != nil {
					held += int64(ls.k - ls.next)
				}
			}
		}
		ks.mu.Unlock()
	}
	return l.leased.granted.Load(), l.leased.handed.Load(), l.leased.lapsed.Load(), held
}

// LeaseSize returns the size the next lease of key would have after a
// batch of n, for tests.
func (l *Limiter) LeaseSize(key string, lim Limit, n int) int {
	s, err := l.specOf(lim)
	if err != nil {
		return 0
	}
	return l.leaseSize(key, s, n)
}

// SeqOf returns r's number on its key, for tests.
func SeqOf(r *Reservation) int64 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.seq
}

// StateSeq reads the number of the last reservation granted from a key's
// state string (either format), for tests.
func StateSeq(state string) (int64, error) {
	st, err := layout.ParseState(state)
	return st.Seq, err
}

// NoPrefetch turns off fetching leases ahead, for tests of the hand-out's
// arithmetic.
func NoPrefetch(l *Limiter) { l.noPrefetch = true }

// AwaitPrefetch waits until the call of the last lease fetched ahead on
// key for lim (if any) has returned, for tests.
func (l *Limiter) AwaitPrefetch(key string, lim Limit) {
	s, err := l.specOf(lim)
	if err != nil {
		return
	}
	ks := l.states.get(key)
	ks.mu.Lock()
	var done chan struct{}
	if slot := ks.leases[s.sig]; slot != nil {
		done = slot.fetched
	}
	ks.mu.Unlock()
	if done != nil {
		<-done
	}
}
